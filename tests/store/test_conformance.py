"""The store contract, run with the same assertions against every backend."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest

from tulip_memory.store import (
    BaseStore,
    InMemoryStore,
    NamespacedStore,
    StoreCapabilityError,
    StoreContext,
    StoreItem,
)
from tulip_memory.store.validation import MAX_QUERY_CHARS


async def test_put_get_roundtrip_json_values(store: BaseStore, tenant: str) -> None:
    ns = (tenant, "user", "u1")
    values = {
        "s": "hello",
        "n": 42,
        "f": 1.5,
        "b": False,
        "l": [1, "two", None],
        "d": {"nested": {"x": [1, 2]}},
        "t": ("tuple", "becomes", "list"),
    }
    for k, v in values.items():
        await store.put(ns, k, v)
    for k, v in values.items():
        expected = list(v) if isinstance(v, tuple) else v
        assert await store.get(ns, k) == expected
    assert await store.get(ns, "missing") is None
    assert await store.exists(ns, "s")
    assert not await store.exists(ns, "missing")


async def test_returned_values_are_copies(store: BaseStore, tenant: str) -> None:
    ns = (tenant, "x")
    value = {"items": [1, 2]}
    await store.put(ns, "k", value)
    value["items"].append(3)
    got = await store.get(ns, "k")
    assert got is not None
    got["items"].append(99)
    assert await store.get(ns, "k") == {"items": [1, 2]}


async def test_item_metadata_timestamps_and_version(store: BaseStore, tenant: str) -> None:
    ns = (tenant, "user", "u1")
    await store.put(ns, "pref", {"theme": "dark"}, {"source": "chat"})
    first = await store.get_item(ns, "pref")
    assert first is not None
    assert first.namespace == ns and first.key == "pref"
    assert first.value == {"theme": "dark"} and first.metadata == {"source": "chat"}
    assert first.version == 1
    assert isinstance(first.created_at, datetime) and first.created_at.tzinfo is not None
    await store.put(ns, "pref", {"theme": "light"})
    await store.put(ns, "pref", {"theme": "blue"})
    third = await store.get_item(ns, "pref")
    assert third is not None
    assert third.version == 3
    assert third.value == {"theme": "blue"} and third.metadata == {}
    assert third.created_at == first.created_at
    assert third.updated_at > first.updated_at
    assert await store.get_item(ns, "missing") is None


async def test_store_item_dict_roundtrip(store: BaseStore, tenant: str) -> None:
    ns = (tenant, "a")
    await store.put(ns, "k", {"v": 1}, {"m": True})
    item = await store.get_item(ns, "k")
    assert item is not None
    assert StoreItem.from_dict(item.to_dict()) == item


async def test_delete_and_list_keys(store: BaseStore, tenant: str) -> None:
    ns = (tenant, "keys")
    for k in ["c", "a", "b", "d"]:
        await store.put(ns, k, k)
    assert await store.list_keys(ns) == ["a", "b", "c", "d"]
    assert await store.list_keys(ns, limit=2) == ["a", "b"]
    assert await store.delete(ns, "b") is True
    assert await store.delete(ns, "b") is False
    assert await store.list_keys(ns) == ["a", "c", "d"]
    assert await store.list_keys((tenant, "other")) == []


async def test_search_without_query_is_most_recent_first(store: BaseStore, tenant: str) -> None:
    ns = (tenant, "recent")
    for k in ["one", "two", "three"]:
        await store.put(ns, k, f"value {k}")
    await store.put(ns, "one", "value one, updated")
    found = await store.search(ns)
    assert [i.key for i in found] == ["one", "three", "two"]
    assert [i.key for i in await store.search(ns, limit=2)] == ["one", "three"]


async def test_search_ranks_by_relevance_and_is_complete(store: BaseStore, tenant: str) -> None:
    if isinstance(store, InMemoryStore) and store.search_mode == "substring":
        pytest.skip("the seed's substring match filters (tests/seeds/test_store.py)")
    ns = (tenant, "facts")
    await store.put(ns, "color", "favourite colour is green")
    await store.put(ns, "city", "lives in Lisbon near the river")
    await store.put(ns, "job", "works as a nurse at night")
    await store.put(ns, "empty", "")
    found = await store.search(ns, "which city does she live in, Lisbon?", limit=10)
    assert found[0].key == "city"
    # Complete: every row comes back, a row without text last.
    assert len(found) == 4 and found[-1].key == "empty"
    assert len(await store.search(ns, "colour", limit=2)) == 2
    assert (await store.search(ns, "colour green", limit=1))[0].key == "color"


async def test_search_many_is_search_per_namespace(store: BaseStore, tenant: str) -> None:
    a, b, c = (tenant, "user"), (tenant, "project"), (tenant, "empty")
    await store.put(a, "1", "likes tea in the morning")
    await store.put(a, "2", "plays chess on weekends")
    await store.put(b, "3", "project deadline is friday")
    for query in [None, "chess weekends"]:
        many = await store.search_many([a, b, c], query, limit=5)
        single = [await store.search(ns, query, limit=5) for ns in (a, b, c)]
        assert [[i.key for i in r] for r in many] == [[i.key for i in r] for r in single]
    assert await store.search_many([]) == []
    with pytest.raises(ValueError, match="spans tenants"):
        await store.search_many([a, ("another-tenant", "user")])


async def test_semantic_search_with_embeddings(store: BaseStore, tenant: str) -> None:
    dim = store.capabilities.embedding_dimension
    assert dim is not None and store.capabilities.semantic_search
    ns = (tenant, "vec")

    def unit(i: int, j: int | None = None) -> list[float]:
        v = [0.0] * dim
        v[i] = 1.0
        if j is not None:
            v[j] = 1.0
        return v

    await store.put_with_embedding(ns, "x", "along x", unit(0), {"kind": "axis"})
    await store.put_with_embedding(ns, "xy", "between", unit(0, 1), {"kind": "diag"})
    await store.put_with_embedding(ns, "y", "along y", unit(1), {"kind": "axis"})
    hits = await store.search_by_embedding(ns, unit(0), limit=10)
    assert [h.item.key for h in hits] == ["x", "xy", "y"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[1].score == pytest.approx(math.sqrt(0.5), abs=1e-5)
    assert hits[2].score == pytest.approx(0.0, abs=1e-5)
    assert hits[0].distance == pytest.approx(0.0, abs=1e-5)
    above = await store.search_by_embedding(ns, unit(0), threshold=0.5)
    assert [h.item.key for h in above] == ["x", "xy"]
    axis = await store.search_by_embedding(ns, unit(1), metadata_filter={"kind": "axis"})
    assert [h.item.key for h in axis] == ["y", "x"]
    assert len(await store.search_by_embedding(ns, unit(0), limit=1)) == 1
    stored = await store.get_embedding(ns, "xy")
    assert stored is not None and stored[0] == pytest.approx(1.0)
    assert await store.get_embedding(ns, "missing") is None
    with pytest.raises(ValueError, match="dimensions"):
        await store.search_by_embedding(ns, [1.0, 0.0])
    with pytest.raises(ValueError, match="dimensions"):
        await store.put_with_embedding(ns, "bad", "v", [1.0])
    with pytest.raises(ValueError, match="NaN"):
        await store.put_with_embedding(ns, "bad", "v", [math.nan] * dim)
    assert await store.get(ns, "bad") is None
    # A threshold is a finite number: NaN kept every hit on one backend, none on another.
    with pytest.raises(ValueError, match="finite"):
        await store.search_by_embedding(ns, unit(0), threshold=math.nan)
    with pytest.raises(TypeError, match="threshold must be a number"):
        await store.search_by_embedding(ns, unit(0), threshold="0.5")  # type: ignore[arg-type]
    assert len(await store.search_by_embedding(ns, unit(0), threshold=0)) == 3  # an int is fine


async def test_put_batch_and_get_batch(store: BaseStore, tenant: str) -> None:
    ns1, ns2 = (tenant, "a"), (tenant, "b")
    await store.put_batch([(ns1, "k1", 1, None), (ns1, "k2", 2, {"m": 1}), (ns2, "k1", 3, None)])
    got = await store.get_batch([(ns1, "k1"), (ns1, "k2"), (ns2, "k1"), (ns2, "missing")])
    assert got == {(ns1, "k1"): 1, (ns1, "k2"): 2, (ns2, "k1"): 3}


async def test_put_batch_with_a_bad_item_writes_nothing(store: BaseStore, tenant: str) -> None:
    ns = (tenant, "atomic")
    with pytest.raises(TypeError, match="JSON"):
        await store.put_batch([(ns, "good", 1, None), (ns, "bad", object(), None)])
    assert await store.list_keys(ns) == []


async def test_list_namespaces_and_clear(store: BaseStore, tenant: str) -> None:
    assert store.capabilities.list_namespaces
    spaces = [(tenant, "user", "u1"), (tenant, "user", "u2"), (tenant, "project")]
    for ns in spaces:
        await store.put(ns, "k1", 1)
        await store.put(ns, "k2", 2)
    assert await store.list_namespaces((tenant,)) == sorted(spaces)
    assert await store.list_namespaces((tenant, "user")) == sorted(spaces[:2])
    assert await store.list_namespaces((tenant,), limit=1) == [sorted(spaces)[0]]
    assert await store.clear_namespace((tenant, "user", "u1")) == 2
    assert await store.list_keys((tenant, "user", "u1")) == []
    assert await store.list_keys((tenant, "user", "u2")) == ["k1", "k2"]
    assert await store.clear_namespace((tenant, "user", "u1")) == 0


@pytest.mark.parametrize(
    ("namespace", "key", "value", "error", "match"),
    [
        ((), "k", 1, ValueError, "at least one part"),
        ("tenant", "k", 1, TypeError, "tuple of strings"),
        (("t", ""), "k", 1, ValueError, "empty"),
        (("t", 3), "k", 1, TypeError, "must be a str"),
        (("t", "a\x1fb"), "k", 1, ValueError, "separator"),
        (("t",), "", 1, ValueError, "empty"),
        (("t",), 7, 1, TypeError, "key must be a str"),
        (("t",), "k" * 1025, 1, ValueError, "1024-byte"),
        (("t",), "k", {1, 2}, TypeError, "not JSON-serializable"),
        (("t",), "k", float("nan"), TypeError, "not JSON-serializable"),
        (("t",), "k", "nul\x00byte", ValueError, "NUL"),
        (("t",), "k", {"a": "lone \ud800"}, ValueError, "surrogate at character"),
    ],
)
async def test_bad_input_is_refused_and_writes_nothing(
    store: BaseStore,
    tenant: str,
    namespace: object,
    key: object,
    value: object,
    error: type[Exception],
    match: str,
) -> None:
    if isinstance(namespace, tuple) and namespace and namespace[0] == "t":
        namespace = (tenant, *namespace[1:])
    with pytest.raises(error, match=match):
        await store.put(namespace, key, value)  # type: ignore[arg-type]
    assert await store.list_keys((tenant,)) == []


async def test_bad_metadata_is_refused(store: BaseStore, tenant: str) -> None:
    with pytest.raises(TypeError, match="metadata"):
        await store.put((tenant,), "k", 1, ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="metadata"):
        await store.put((tenant,), "k", 1, {"x": object()})
    assert await store.get((tenant,), "k") is None


async def test_oversized_and_mistyped_queries_are_refused(store: BaseStore, tenant: str) -> None:
    await store.put((tenant,), "k", "green tea")
    with pytest.raises(ValueError, match="character limit") as refused:
        await store.search((tenant,), "tea " * (MAX_QUERY_CHARS // 4 + 1))
    assert "tea" not in str(refused.value)  # the user's words stay out of error text
    with pytest.raises(TypeError, match="query must be a str"):
        await store.search_many([(tenant,)], 42)  # type: ignore[arg-type]
    # A lone surrogate (what a JSON "\ud800" escape decodes to) is searched as text
    # (the seed's substring match finds no row containing it).
    substring = isinstance(store, InMemoryStore) and store.search_mode == "substring"
    found = [i.key for i in await store.search((tenant,), "tea \udfff")]
    assert found == ([] if substring else ["k"])
    assert [i.key for i in await store.search((tenant,), "tea")] == ["k"]


async def test_limits_are_ints_and_one_under_1_finds_nothing(store: BaseStore, tenant: str) -> None:
    # Every backend alike: a negative limit was Postgres's "LIMIT must not be negative"
    # on one, every key but the last on another; 0 gave one result by embedding.
    ns = (tenant, "lim")
    dim = store.capabilities.embedding_dimension
    assert dim is not None
    vector = [1.0] + [0.0] * (dim - 1)
    for key in ("a", "b", "c"):
        await store.put_with_embedding(ns, key, f"green tea {key}", vector)
    # Each call's results, counted (search_many's of its one namespace).
    calls: dict[str, Callable[[Any], Awaitable[list[Any]]]] = {
        "search": lambda n: store.search(ns, "tea", limit=n),
        "search_many": lambda n: _only(store.search_many([ns], "tea", limit=n)),
        "search_by_embedding": lambda n: store.search_by_embedding(ns, vector, limit=n),
        "list_keys": lambda n: store.list_keys(ns, limit=n),
        "list_namespaces": lambda n: store.list_namespaces((tenant,), limit=n),
    }
    for name, call in calls.items():
        for bound in (0, -1, -(10**12)):
            assert await call(bound) == [], (name, bound)
        assert len(await call(2)) == (1 if name == "list_namespaces" else 2), name
        for bad in (True, 2.5, "2", None):
            with pytest.raises(TypeError, match="limit must be an int"):
                await call(bad)


async def _only(found: Awaitable[list[list[StoreItem]]]) -> list[StoreItem]:
    lists = await found
    assert len(lists) == 1
    return lists[0]


async def test_concurrent_writes_are_all_counted(store: BaseStore, tenant: str) -> None:
    ns = (tenant, "race")
    await asyncio.gather(*(store.put(ns, "counter", i) for i in range(30)))
    item = await store.get_item(ns, "counter")
    assert item is not None and item.version == 30


async def test_namespaced_store_and_store_context(store: BaseStore, tenant: str) -> None:
    scoped = NamespacedStore(store, (tenant, "users")).scoped("u1")
    assert scoped.namespace == (tenant, "users", "u1")
    await scoped.put("prefs", {"theme": "dark"})
    assert await scoped.get("prefs") == {"theme": "dark"}
    assert await store.get((tenant, "users", "u1"), "prefs") == {"theme": "dark"}
    assert await scoped.list_keys() == ["prefs"]
    assert await scoped.delete("prefs")

    ctx = StoreContext(store, user_id=tenant, session_id="s1")
    assert ctx.store is store
    await ctx.remember("topic", {"topic": "python"})
    assert await ctx.get_user_memory("topic") == {"topic": "python"}
    assert [i.key for i in await ctx.search_memories("python")] == ["topic"]
    dim = store.capabilities.embedding_dimension
    assert dim is not None
    await ctx.remember_with_embedding("vec", {"v": 1}, [1.0] + [0.0] * (dim - 1))
    hits = await ctx.search_memories_semantic([1.0] + [0.0] * (dim - 1), threshold=0.9)
    assert [h.item.key for h in hits] == ["vec"]
    assert await ctx.forget("topic") and not await ctx.forget("topic")
    assert ctx.for_user().namespace == ("users", tenant)
    assert ctx.for_session().namespace == ("sessions", "s1")
    with pytest.raises(ValueError, match="user_id"):
        StoreContext(store).for_user()
    assert await StoreContext(store).search_memories("x") == []
    assert await StoreContext(store).get_user_memory("x") is None


async def test_capabilities_are_advertised(store: BaseStore) -> None:
    caps = store.capabilities
    assert caps.search and caps.semantic_search and caps.batch_operations


class _PlainStore(BaseStore):
    """The least a backend must write: the four abstract methods."""

    def __init__(self) -> None:
        self.data: dict[tuple[tuple[str, ...], str], object] = {}

    async def put(self, namespace, key, value, metadata=None):  # type: ignore[no-untyped-def]
        self.data[(namespace, key)] = value

    async def get(self, namespace, key):  # type: ignore[no-untyped-def]
        return self.data.get((namespace, key))

    async def delete(self, namespace, key):  # type: ignore[no-untyped-def]
        return self.data.pop((namespace, key), None) is not None

    async def list_keys(self, namespace, limit=100):  # type: ignore[no-untyped-def]
        return [k for (n, k) in self.data if n == namespace][:limit]


async def test_base_store_defaults_and_capability_errors() -> None:
    s = _PlainStore()
    ns = ("t",)
    await s.put_batch([(ns, "a", 1, None), (ns, "b", 2, None)])
    assert await s.get_batch([(ns, "a"), (ns, "zz")]) == {(ns, "a"): 1}
    assert await s.exists(ns, "a")
    item = await s.get_item(ns, "a")
    assert item is not None and item.value == 1 and item.version == 1
    for call, capability in [
        (s.search(ns, "q"), "search"),
        (s.search_many([ns], "q"), "search"),
        (s.put_with_embedding(ns, "k", 1, [1.0]), "semantic_search"),
        (s.search_by_embedding(ns, [1.0]), "semantic_search"),
        (s.get_embedding(ns, "k"), "semantic_search"),
        (s.list_namespaces(), "list_namespaces"),
    ]:
        with pytest.raises(StoreCapabilityError) as info:
            await call
        assert info.value.capability == capability
        assert info.value.store_class == "_PlainStore"
        assert isinstance(info.value, NotImplementedError)
    assert await s.clear_namespace(ns) == 2
    assert s.capabilities.search is False

"""LangGraph's BaseStore contract, as its documentation states it, run against TulipStore
(in memory and on PgMemory) and against LangGraph's own InMemoryStore, so every
assertion here is checked against the reference as well."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore as LangGraphInMemoryStore

from tests.support.pg import app_store
from tulip_memory.langgraph import TulipStore

INDEX = {"dims": 64, "embed": "hashing:64"}


@pytest.fixture(params=["langgraph-reference", "tulip-memory", "tulip-postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[BaseStore]:
    if request.param == "langgraph-reference":
        yield LangGraphInMemoryStore()
        return
    if request.param == "tulip-memory":
        made = TulipStore.in_memory()
    else:
        table = f"lg_{uuid.uuid4().hex[:8]}"
        made = TulipStore(app_store(request.getfixturevalue("pg_dsn"), table=table))
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def t() -> str:
    """The tenant (namespace[0]) of this test."""
    return f"tenant-{uuid.uuid4().hex[:8]}"


def test_put_then_get_returns_the_item(store: BaseStore, t: str) -> None:
    store.put((t, "prefs"), "theme", {"color": "dark", "size": 3})
    item = store.get((t, "prefs"), "theme")
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value) == (
        (t, "prefs"),
        "theme",
        {"color": "dark", "size": 3},
    )
    assert item.created_at <= item.updated_at
    assert store.get((t, "prefs"), "missing") is None
    assert store.get((t, "other"), "theme") is None


def test_put_again_replaces_the_value(store: BaseStore, t: str) -> None:
    store.put((t,), "k", {"v": 1})
    first = store.get((t,), "k")
    store.put((t,), "k", {"v": 2})
    second = store.get((t,), "k")
    assert first is not None and second is not None
    assert second.value == {"v": 2}
    assert second.updated_at >= first.updated_at


def test_delete_removes_the_item(store: BaseStore, t: str) -> None:
    store.put((t,), "k", {"v": 1})
    store.delete((t,), "k")
    assert store.get((t,), "k") is None
    store.delete((t,), "never-there")  # no error


def test_batch_runs_each_op_and_returns_its_result(store: BaseStore, t: str) -> None:
    store.batch([PutOp((t, "a"), "1", {"n": 1}), PutOp((t, "b"), "2", {"n": 2})])
    got = store.batch(
        [
            GetOp((t, "a"), "1"),
            GetOp((t, "a"), "nope"),
            SearchOp((t,), filter={"n": 2}),
            # A listing names its tenant: PgMemory's row-level security allows no other.
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", (t,)),)),
        ]
    )
    first, missing, searched, spaces = got
    assert isinstance(first, Item) and first.value == {"n": 1}
    assert missing is None
    assert isinstance(searched, list) and [getattr(i, "key", i) for i in searched] == ["2"]
    assert isinstance(spaces, list) and {(t, "a"), (t, "b")} <= set(spaces)


async def test_the_async_methods_match(store: BaseStore, t: str) -> None:
    await store.aput((t, "x"), "k", {"v": "async"})
    item = await store.aget((t, "x"), "k")
    assert item is not None and item.value == {"v": "async"}
    found = await store.asearch((t,))
    assert [i.key for i in found] == ["k"]
    assert await store.alist_namespaces(prefix=(t,)) == [(t, "x")]
    await store.adelete((t, "x"), "k")
    assert await store.aget((t, "x"), "k") is None


def test_search_covers_the_namespaces_under_the_prefix(store: BaseStore, t: str) -> None:
    store.put((t, "docs", "a"), "1", {"text": "one"})
    store.put((t, "docs", "b"), "2", {"text": "two"})
    store.put((t, "mail"), "3", {"text": "three"})
    assert {i.key for i in store.search((t, "docs"))} == {"1", "2"}
    assert {i.key for i in store.search((t,))} == {"1", "2", "3"}
    assert store.search((t, "nothing")) == []


def test_search_filters_on_value_fields_with_operators(store: BaseStore, t: str) -> None:
    for i in range(10):
        store.put((t, "scores"), f"k{i}", {"score": i, "color": "red" if i % 2 else "blue"})

    def keys(**f: object) -> set[str]:
        return {i.key for i in store.search((t,), filter=f, limit=100)}

    assert keys(color="red") == {"k1", "k3", "k5", "k7", "k9"}
    assert keys(score={"$gt": 6}) == {"k7", "k8", "k9"}
    assert keys(score={"$gte": 2, "$lt": 4}) == {"k2", "k3"}
    assert keys(score={"$lte": 1}) == {"k0", "k1"}
    assert keys(score={"$ne": 0}, color={"$eq": "blue"}) == {"k2", "k4", "k6", "k8"}
    assert keys(color="green") == set()


def test_a_filtered_page_is_complete(store: BaseStore, t: str) -> None:
    """limit matching items whatever how many others the scope holds."""
    for i in range(60):
        store.put((t, "many"), f"k{i:02}", {"kind": "wanted" if i % 20 == 0 else "other"})
    found = store.search((t,), filter={"kind": "wanted"}, limit=3)
    assert {i.key for i in found} == {"k00", "k20", "k40"}


def test_offset_and_limit_page_through_the_results(store: BaseStore, t: str) -> None:
    for i in range(7):
        store.put((t, "pages"), f"k{i}", {"i": i})
    pages = [store.search((t,), limit=3, offset=o) for o in (0, 3, 6)]
    assert [len(p) for p in pages] == [3, 3, 1]
    keys = [i.key for p in pages for i in p]
    assert sorted(keys) == [f"k{i}" for i in range(7)]  # each item on one page


def test_list_namespaces_matches_prefix_suffix_wildcards_and_depth(
    store: BaseStore, t: str
) -> None:
    for ns in [(t, "a", "v1"), (t, "a", "v2"), (t, "b", "v1"), (t, "b", "deep", "v1")]:
        store.put(ns, "k", {"x": 1})
    assert store.list_namespaces(prefix=(t, "a")) == [(t, "a", "v1"), (t, "a", "v2")]
    assert store.list_namespaces(prefix=(t,), suffix=("v1",)) == [
        (t, "a", "v1"),
        (t, "b", "deep", "v1"),
        (t, "b", "v1"),
    ]
    assert store.list_namespaces(prefix=(t, "*", "v2")) == [(t, "a", "v2")]
    assert store.list_namespaces(prefix=(t,), max_depth=2) == [(t, "a"), (t, "b")]
    assert store.list_namespaces(prefix=(t,), limit=2, offset=1) == [
        (t, "a", "v2"),
        (t, "b", "deep", "v1"),
    ]


def test_a_ttl_is_refused_unless_supported(store: BaseStore, t: str) -> None:
    if store.supports_ttl:
        pytest.skip("this store supports TTL")
    with pytest.raises(NotImplementedError):
        store.put((t,), "k", {"v": 1}, ttl=5)


@pytest.fixture(params=["langgraph-reference", "tulip-memory", "tulip-postgres"])
def indexed(request: pytest.FixtureRequest) -> Iterator[BaseStore]:
    """Stores that embed (a word-hashing model: offline, deterministic)."""
    if request.param == "langgraph-reference":
        from tulip_memory.embeddings import embedder_from_config

        encoder = embedder_from_config("hashing:64", dimension=64)
        embed = lambda texts: encoder.embed(texts).tolist()  # noqa: E731
        yield LangGraphInMemoryStore(index={"dims": 64, "embed": embed})
        return
    if request.param == "tulip-memory":
        made = TulipStore.in_memory(index=INDEX)  # type: ignore[arg-type]
    else:
        from tulip_memory.langgraph.index import embedder_of

        table = f"lg_{uuid.uuid4().hex[:8]}"
        pg = app_store(request.getfixturevalue("pg_dsn"), table=table, embedder=embedder_of(INDEX))  # type: ignore[arg-type]
        made = TulipStore(pg, index=INDEX)  # type: ignore[arg-type]
    try:
        yield made
    finally:
        made.close()


def test_a_query_ranks_the_matching_item_first(indexed: BaseStore, t: str) -> None:
    indexed.put((t, "notes"), "pets", {"text": "my dog likes long walks in the park"})
    indexed.put((t, "notes"), "food", {"text": "pasta with tomato sauce for dinner"})
    indexed.put((t, "notes"), "work", {"text": "quarterly report due on friday"})
    found = indexed.search((t,), query="dog walks park", limit=3)
    assert found[0].key == "pets"
    assert found[0].score is not None and found[0].score >= found[-1].score  # type: ignore[operator]


def test_index_false_comes_after_what_a_query_ranks(indexed: BaseStore, t: str) -> None:
    indexed.put((t, "n"), "hidden", {"text": "secret dog walks", "kind": "x"}, index=False)
    indexed.put((t, "n"), "shown", {"text": "pasta dinner", "kind": "x"})
    indexed.put((t, "n"), "dog", {"text": "dog walks", "kind": "y"})
    found = indexed.search((t,), query="dog walks", limit=5)
    assert [i.key for i in found] == ["dog", "shown", "hidden"]
    assert found[-1].score is None and found[0].score is not None
    assert [i.key for i in indexed.search((t,), query="dog walks", limit=2)] == ["dog", "shown"]
    assert {i.key for i in indexed.search((t,), filter={"kind": "x"})} == {"hidden", "shown"}


def test_index_fields_choose_what_a_query_matches(indexed: BaseStore, t: str) -> None:
    indexed.put((t, "n"), "a", {"title": "dog walks park", "body": "tax forms"}, index=["body"])
    indexed.put((t, "n"), "b", {"title": "tax forms", "body": "dog walks park"}, index=["body"])
    found = indexed.search((t,), query="dog walks park", limit=2)
    assert found[0].key == "b"

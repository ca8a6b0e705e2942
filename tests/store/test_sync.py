"""SyncStore: the blocking facade generated from the async core."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.pg import app_store
from tulip_memory.store import InMemoryStore, SyncStore


@pytest.fixture(params=["memory", "postgres"])
def sync_store(request: pytest.FixtureRequest) -> SyncStore:
    if request.param == "memory":
        return SyncStore(InMemoryStore())
    return SyncStore(app_store(request.getfixturevalue("pg_dsn")))


def test_every_async_method_is_callable_synchronously(sync_store: SyncStore) -> None:
    tenant = f"sync-{uuid.uuid4().hex[:8]}"
    ns = (tenant, "u")
    with sync_store as s:
        s.put(ns, "k", {"v": 1}, {"m": 2})
        assert s.get(ns, "k") == {"v": 1}
        assert s.exists(ns, "k")
        assert s.get_item(ns, "k").version == 1
        s.put_batch([(ns, "a", "alpha beta", None), (ns, "b", "gamma", None)])
        assert s.list_keys(ns) == ["a", "b", "k"]
        assert [i.key for i in s.search(ns, "gamma", limit=1)] == ["b"]
        assert len(s.search_many([ns], None, limit=2)[0]) == 2
        assert s.delete(ns, "a") is True
        assert s.clear_namespace(ns) == 2
        assert s.capabilities.search
        with pytest.raises(AttributeError, match="no attribute 'nope'"):
            s.nope  # noqa: B018


def test_threads_share_one_store_safely(sync_store: SyncStore) -> None:
    tenant = f"sync-{uuid.uuid4().hex[:8]}"
    ns = (tenant, "threads")
    with sync_store as s, ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: s.put(ns, f"k{i:03d}", i), range(200)))
        list(pool.map(lambda i: s.put(ns, "shared", i), range(50)))
        assert len(s.list_keys(ns, limit=1000)) == 201
        item = s.get_item(ns, "shared")
        assert item is not None and item.version == 50


async def test_usable_from_code_running_inside_an_event_loop() -> None:
    # A sync helper called from async code must not deadlock on the caller's loop.
    s = SyncStore(InMemoryStore())
    s.put(("t",), "k", 1)
    assert s.get(("t",), "k") == 1
    await asyncio.sleep(0)
    s.close()

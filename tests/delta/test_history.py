"""The history cache: an old checkpoint loaded again reads only the head, and what is
rebuilt from cached objects is still exactly the checkpoint."""

from __future__ import annotations

from dataclasses import replace

from tests.delta.conftest import CountingStorage, grow
from tulip_memory.delta import DeltaCheckpointer, DeltaStorage, InMemoryObjectStorage, Policy
from tulip_memory.delta.codec import dumps
from tulip_memory.delta.history import HistoryCache
from tulip_memory.delta.log import ThreadLog
from tulip_memory.delta.manifest import Entry
from tulip_memory.messages import Message, Role


async def test_an_old_checkpoint_loaded_again_reads_only_the_head(storage: DeltaStorage) -> None:
    """...and one the checkpointer wrote, the first time too: it kept what it wrote."""
    counted = CountingStorage(storage)
    writer = DeltaCheckpointer(counted)
    states = grow(80)
    ids = [await writer.save(s, "t") for s in states]
    for n in (70, 3, 41, 69):
        counted.reset()
        assert await writer.load("t", ids[n]) == states[n]
        assert (counted.read_trips, counted.gets) == (1, 1)
    cp = DeltaCheckpointer(counted)  # another process's, which wrote nothing
    counted.reset()
    assert await cp.load("t", ids[70]) == states[70]
    assert counted.read_trips == 2 and counted.gets > 2  # the head, then its objects
    for n in (70, 3, 41, 69):
        counted.reset()
        assert await cp.load("t", ids[n]) == states[n]
        assert (counted.read_trips, counted.gets) == (1, 1)
    assert len(cp.history_cache) > 0 and cp.history_cache.bytes > 0


async def test_without_a_history_cache_every_old_load_reads_its_objects() -> None:
    counted = CountingStorage(InMemoryObjectStorage())
    cp = DeltaCheckpointer(counted, history_cache=HistoryCache(0))
    states = grow(40)
    ids = [await cp.save(s, "t") for s in states]
    for _ in range(2):
        counted.reset()
        assert await cp.load("t", ids[20]) == states[20]
        assert counted.read_trips == 2
    assert len(cp.history_cache) == 0


async def test_a_loaded_state_changed_in_place_does_not_change_a_later_load(
    storage: DeltaStorage,
) -> None:
    """The checkpointer hands an old checkpoint over uncopied to the state it builds,
    which shares none of its dicts or lists, however deep, with the cached entries: a
    caller changing the state in place leaves the cache as it was (a later load is
    exact and reads only the head; a changed cache would fail its digest and be read
    again)."""
    counted = CountingStorage(storage)
    cp = DeltaCheckpointer(counted)
    first = Message(role=Role.USER, content="x", metadata={"deep": [[0]]})
    states = [
        replace(s, messages=(first, *s.messages))
        for s in grow(40, metadata=lambda i: {"turn": i, "tags": [{"n": i}]})
    ]
    ids = [await cp.save(s, "t") for s in states]
    for n in (20, 21, 20):  # a replay going on from the state an earlier one kept
        loaded = await cp.load("t", ids[n])
        assert loaded == states[n]
        loaded.metadata["tags"][0]["n"] = "changed"
        loaded.messages[0].metadata["deep"][0].append("changed")
        loaded.tool_executions["x"] = 1
        for m in (n, n + 1):
            counted.reset()
            assert await cp.load("t", ids[m]) == states[m]
            assert (counted.read_trips, counted.gets) == (1, 1)


async def test_a_loaded_value_changed_in_place_does_not_change_a_later_load() -> None:
    storage = InMemoryObjectStorage()
    cp = DeltaCheckpointer(storage)
    states = grow(40)
    ids = [await cp.save(s, "t") for s in states]
    log = ThreadLog(storage, "t", Policy(), history=HistoryCache())
    loaded = await log.load(ids[20])
    assert loaded is not None
    loaded["messages"][0]["content"] = "changed by the caller"
    loaded["messages"][1]["metadata"]["deep"] = ["changed too"]
    loaded["messages"].append(loaded["messages"][0])
    again = await log.load(ids[20])
    assert again is not None and again["messages"][0]["content"] != "changed by the caller"
    assert again == states[20].to_checkpoint()
    assert dumps(await log.load(ids[21])) == dumps(states[21].to_checkpoint())


async def test_a_deleted_checkpoint_is_gone_though_its_objects_are_cached() -> None:
    cp = DeltaCheckpointer(InMemoryObjectStorage())
    states = grow(40)
    ids = [await cp.save(s, "t") for s in states]
    assert await cp.load("t", ids[10]) == states[10]
    assert await cp.delete("t", ids[10])
    assert await cp.load("t", ids[10]) is None
    assert await cp.load("t", ids[11]) == states[11]  # rebased onto ids[9]


def entry(seq: int) -> Entry:
    return Entry(seq=seq, created_us=0, digest="d", kind="full", payload={})


def test_the_cache_is_bounded_least_recently_used_first_out() -> None:
    cache = HistoryCache(max_bytes=100)
    cache.put("a", 10, [entry(0)], 60)
    cache.put("b", 10, [entry(1)], 30)
    assert cache.get("a", 10) is not None  # a is now the most recent
    cache.put("c", 10, [entry(2)], 40)
    assert cache.get("b", 10) is None and cache.get("a", 10) is not None
    assert cache.bytes == 100 and len(cache) == 2
    cache.put("d", 10, [entry(3)], 101)  # larger than the bound: not kept
    assert cache.get("d", 10) is None and cache.bytes == 100
    assert cache.get("a", 11) is None  # named at another size: not this object


def test_scoped_views_share_the_budget_but_not_the_keys() -> None:
    cache = HistoryCache(max_bytes=100)
    a, b = cache.scoped("a"), cache.scoped("b")
    a.put("log/x", 10, [entry(0)], 70)
    assert b.get("log/x", 10) is None and cache.get("log/x", 10) is None
    b.put("log/x", 10, [entry(1)], 70)
    assert a.get("log/x", 10) is None  # evicted: one budget
    assert b.forget(["log/x"]) and not b.forget(["log/x"])
    assert cache.bytes == 0


async def test_objects_a_merge_retires_leave_the_cache() -> None:
    storage = InMemoryObjectStorage()
    cp = DeltaCheckpointer(storage)
    states = grow(120)
    ids = [await cp.save(s, "t") for s in states[:30]]
    assert await cp.load("t", ids[20]) == states[20]  # reads its objects, now cached
    before = set((await storage.list_objects("log/")).keys)
    assert any(k in cp.history_cache for k in before)
    ids += [await cp.save(s, "t") for s in states[30:]]  # merges retire those objects
    gone = before - set((await storage.list_objects("log/")).keys)
    assert gone and not any(k in cp.history_cache for k in gone)
    assert await cp.load("t", ids[20]) == states[20]
    assert await cp.delete("t")
    assert len(cp.history_cache) == 0


async def test_without_a_history_cache_a_changed_load_changes_nothing_either() -> None:
    """The writer's head keeps its newest entries (pending, written again by the next
    save): a state rebuilt from them is a copy too."""
    cp = DeltaCheckpointer(InMemoryObjectStorage(), history_cache=HistoryCache(0))
    states = grow(40)
    ids = [await cp.save(s, "t") for s in states]
    log = ThreadLog(cp.storage, "t", cp.policy, cp.latest_cache, cp.history_cache)
    for n in (38, 10):  # among the head's pending entries, then from objects
        loaded = await log.load(ids[n])
        assert loaded is not None
        loaded["messages"][-1]["metadata"]["deep"] = ["changed by the caller"]
        assert await cp.load("t", ids[n]) == states[n]
    await cp.save(grow(41)[-1], "t")
    assert await cp.load("t", ids[38]) == states[38]

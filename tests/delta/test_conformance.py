"""The delta checkpointer on every storage backend: same assertions for all."""

from __future__ import annotations

import asyncio
import math
from datetime import datetime

import pytest

from tests.delta.conftest import CountingStorage, grow, message
from tulip_memory.delta import (
    CheckpointMetadata,
    DeltaCheckpoint,
    DeltaCheckpointer,
    DeltaStorage,
    InvalidCheckpointIdError,
    InvalidThreadIdError,
    StateNotSerializableError,
)
from tulip_memory.messages import Message, Role, ToolCall
from tulip_memory.state import AgentState

THREAD = "ticket-8912-refund"


async def save_all(cp: DeltaCheckpointer, states: list[AgentState], thread: str) -> list[str]:
    return [await cp.save(s, thread) for s in states]


async def test_save_and_load_latest_and_every_checkpoint(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage, max_chain_depth=2)
    states = grow(20)
    ids = await save_all(cp, states, THREAD)
    assert await cp.load(THREAD) == states[-1]
    for cid, state in zip(ids, states, strict=True):
        assert await cp.load(THREAD, cid) == state
    assert await cp.load("no-such-thread") is None
    assert await cp.load(THREAD, "no-such-checkpoint") is None


async def test_rich_states_round_trip_exactly(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage)
    call = ToolCall(id="c1", name="lookup", arguments={"order": "ord-4821", "deep": {"x": [1]}})
    state = AgentState(
        messages=[
            Message(role=Role.SYSTEM, content="be brief", metadata={"memory_block": True}),
            Message(role=Role.ASSISTANT, tool_calls=[call]),
            Message(role=Role.TOOL, content="eligible", tool_call_id="c1", name="lookup"),
        ],
        tool_executions={"lookup:ord-4821": {"result": "eligible", "n": 1.5, "ok": True}},
        iterations=3,
        metadata={"f": 1.0, "i": 1, "b": True, "none": None, "s": "ünï 🧵", "l": [1, 1.0]},
    )
    first = await cp.save(state, THREAD)
    changed = AgentState(
        messages=state.messages,
        tool_executions=state.tool_executions,
        iterations=3,
        metadata={**state.metadata, "f": 1, "i": 1.0, "b": 1},  # equal under ==, not in JSON
    )
    second = await cp.save(changed, THREAD)
    await cp.save(AgentState(), THREAD)
    for cid, expected in ((first, state), (second, changed)):
        got = await cp.load(THREAD, cid)
        assert got is not None and got == expected
        assert {k: type(v) for k, v in got.metadata.items()} == {
            k: type(v) for k, v in expected.metadata.items()
        }


async def test_list_checkpoints_newest_first_and_metadata(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage, max_chain_depth=2)
    ids = await save_all(cp, grow(8), THREAD)
    assert await cp.list_checkpoints(THREAD) == ids[::-1]
    assert await cp.list_checkpoints(THREAD, limit=3) == ids[:-4:-1]
    assert await cp.list_checkpoints("nobody") == []
    metas = await storage.list_checkpoints(THREAD, limit=5)
    assert [m.checkpoint_id for m in metas] == ids[:-6:-1]
    first = await cp.get_metadata(THREAD, ids[0])
    assert isinstance(first, CheckpointMetadata)
    assert first.is_full and first.parent_id is None and first.chain_depth == 0
    assert first.thread_id == THREAD and first.created_at.tzinfo is not None
    fourth = await cp.get_metadata(THREAD, ids[3])
    assert fourth is not None and not fourth.is_full
    assert fourth.parent_id == ids[2] and fourth.chain_depth == 3
    assert fourth.compressed_size_bytes > 0 and 0 < fourth.size_bytes < 400
    assert isinstance(fourth.created_at, datetime)
    assert await cp.get_metadata(THREAD, "nope") is None


async def test_storage_stats(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage)
    empty = await cp.get_storage_stats(THREAD)
    assert empty["total_checkpoints"] == 0 and empty["compression_ratio"] == 1.0
    await save_all(cp, grow(12), THREAD)
    stats = await cp.get_storage_stats(THREAD)
    assert stats["total_checkpoints"] == 12
    assert stats["full_checkpoints"] == 1 and stats["delta_checkpoints"] == 11
    assert stats["total_size"] > 0 and stats["compressed_size"] > 0
    assert stats["stored_bytes"] > 0 and stats["storage_objects"] >= 2


@pytest.mark.parametrize("victim", [0, 5, 6, 13])
async def test_delete_one_checkpoint_keeps_every_other_loadable(
    storage: DeltaStorage, victim: int
) -> None:
    cp = DeltaCheckpointer(storage, max_chain_depth=2)
    states = grow(14)
    ids = await save_all(cp, states, THREAD)
    assert await cp.delete(THREAD, ids[victim])
    assert not await cp.delete(THREAD, ids[victim])
    assert await cp.load(THREAD, ids[victim]) is None
    for i, (cid, state) in enumerate(zip(ids, states, strict=True)):
        if i != victim:
            assert await cp.load(THREAD, cid) == state
    survivors = [c for i, c in enumerate(ids) if i != victim]
    assert await cp.list_checkpoints(THREAD, limit=100) == survivors[::-1]
    assert await cp.load(THREAD) == states[-1 if victim != 13 else -2]
    more = AgentState(messages=[*states[-1].messages, message(99)])
    last = await cp.save(more, THREAD)
    assert await cp.load(THREAD, last) == more


async def test_delete_everything_one_by_one_then_the_thread(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage, max_chain_depth=1)
    states = grow(6)
    ids = await save_all(cp, states, THREAD)
    for cid in reversed(ids[1:]):
        assert await cp.delete(THREAD, cid)
        assert await cp.load(THREAD) == states[ids.index(cid) - 1]
    assert await cp.delete(THREAD, ids[0])
    assert await cp.load(THREAD) is None
    assert await cp.list_threads() == []
    await save_all(cp, states[:3], THREAD)
    assert await cp.delete(THREAD)
    assert not await cp.delete(THREAD)
    assert await cp.list_threads() == []
    assert (await storage.list_objects("")).objects == ()


async def test_copy_thread_branches_with_all_checkpoints(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage, max_chain_depth=2)
    states = grow(11)
    ids = await save_all(cp, states, "case-7731-triage")
    await save_all(cp, grow(2), "case-7731-triage-replay")  # replaced by the copy
    assert await cp.copy_thread(
        source_thread_id="case-7731-triage", dest_thread_id="case-7731-triage-replay"
    )
    for cid, state in zip(ids, states, strict=True):
        assert await cp.load("case-7731-triage-replay", cid) == state
    meta = await cp.get_metadata("case-7731-triage-replay", ids[4])
    assert meta is not None and meta.thread_id == "case-7731-triage-replay"
    branched = AgentState(messages=[message(0, "a different future")])
    await cp.save(branched, "case-7731-triage-replay")
    assert await cp.load("case-7731-triage") == states[-1]
    assert await cp.load("case-7731-triage-replay") == branched
    assert not await cp.copy_thread("nothing-here", "elsewhere")
    assert await cp.delete("case-7731-triage-replay")
    assert await cp.list_threads() == ["case-7731-triage"]


HOSTILE = ["../../etc/passwd", "a/b", "..", "UPPER", "upper", "émoji 🧵", "x" * 512, "🧵" * 512]


async def test_hostile_thread_ids_list_load_copy_delete(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage)
    for i, tid in enumerate(HOSTILE):
        await cp.save(AgentState(iterations=i), tid)
    assert sorted(await cp.list_threads()) == sorted(HOSTILE)
    for i, tid in enumerate(HOSTILE):
        got = await cp.load(tid)
        assert got is not None and got.iterations == i
    assert await cp.copy_thread("x" * 512, "🧵" * 511 + "!")
    assert "🧵" * 511 + "!" in await cp.list_threads()
    for tid in [*HOSTILE, "🧵" * 511 + "!"]:
        assert await cp.delete(tid)
    assert await cp.list_threads() == []
    assert (await storage.list_objects("")).objects == ()


async def test_list_threads_pages(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage)
    tids = [f"thread-{i}" for i in range(7)] + ["y" * 400]
    for tid in tids:
        await cp.save(AgentState(), tid)
    seen: list[str] = []
    token = None
    while True:
        page = await cp.list_threads_page(page_size=3, page_token=token)
        assert len(page.thread_ids) <= 3
        seen.extend(page.thread_ids)
        token = page.next_page_token
        if token is None:
            break
    assert sorted(seen) == sorted(tids) and len(seen) == len(tids)
    assert sorted([t async for t in cp.iter_threads(page_size=2)]) == sorted(tids)
    assert len(await cp.list_threads(limit=5)) == 5


async def test_refusals_write_nothing(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage)
    with pytest.raises(StateNotSerializableError, match=r"metadata\.when"):
        await cp.save(AgentState(metadata={"when": datetime(2024, 1, 1)}), THREAD)
    with pytest.raises(StateNotSerializableError):
        await cp.save(AgentState(metadata={"x": math.nan}), THREAD)
    with pytest.raises(InvalidThreadIdError):
        await cp.save(AgentState(), "")
    with pytest.raises(InvalidCheckpointIdError):
        await cp.save(AgentState(), THREAD, checkpoint_id="x" * 2000)
    assert (await storage.list_objects("")).objects == ()


async def test_saving_under_an_existing_id(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage, max_chain_depth=2)
    states = grow(7)
    ids = await save_all(cp, states, THREAD)
    assert await cp.save(states[-1], THREAD, ids[-1]) == ids[-1]  # a retry: no-op
    assert await cp.list_checkpoints(THREAD, limit=50) == ids[::-1]
    replacement = AgentState(messages=[message(0, "replaced")])
    await cp.save(replacement, THREAD, ids[2])  # replaces checkpoint 2, now the newest
    expected = [ids[2]] + [c for c in ids[::-1] if c != ids[2]]
    assert await cp.list_checkpoints(THREAD, limit=50) == expected
    assert await cp.load(THREAD, ids[2]) == replacement
    for i in (0, 1, 3, 4, 5, 6):
        assert await cp.load(THREAD, ids[i]) == states[i]


async def test_seed_storage_contract_store_and_retrieve(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage)
    states = grow(4)
    ids = await save_all(cp, states, THREAD)
    full = await storage.retrieve(THREAD, ids[0])
    delta = await storage.retrieve(THREAD, ids[1])
    assert isinstance(full, DeltaCheckpoint) and not full.is_delta
    assert delta is not None and delta.is_delta and delta.compression_ratio > 0
    assert await storage.retrieve(THREAD, "nope") is None
    await storage.store("other", "c-0", full)
    await storage.store("other", "c-1", delta)
    assert await cp.load("other", "c-0") == states[0]
    assert await cp.load("other", "c-1") == states[1]
    assert [m.checkpoint_id for m in await storage.list_checkpoints("other")] == ["c-1", "c-0"]
    assert await storage.delete("other", "c-0")
    assert await cp.load("other") == states[1]


async def test_round_trips_latest_one_older_two_within_the_bound(storage: DeltaStorage) -> None:
    depth, n = 2, 90  # 3**4 = 81 <= 90: four merge levels
    counted = CountingStorage(storage)
    cp = DeltaCheckpointer(counted, max_chain_depth=depth)
    states = grow(n)
    ids = await save_all(cp, states, THREAD)
    counted.reset()
    assert await cp.load(THREAD) == states[-1]
    assert (counted.read_trips, counted.gets) == (1, 1)
    bound = depth * math.floor(math.log(n, depth + 1)) + 1
    for cid, state in zip(ids, states, strict=True):
        counted.reset()
        assert await cp.load(THREAD, cid) == state
        assert counted.read_trips <= 2
        assert counted.gets <= 1 + bound
    counted.reset()
    await cp.list_checkpoints(THREAD)
    assert counted.read_trips == 1


async def test_saves_take_two_round_trips_and_store_near_the_limit(storage: DeltaStorage) -> None:
    counted = CountingStorage(storage)
    cp = DeltaCheckpointer(counted)
    states = grow(60)
    trips = []
    for s in states:
        counted.reset()
        await cp.save(s, THREAD)
        trips.append((counted.read_trips, counted.write_trips))
    assert max(r for r, _ in trips) <= 2 and max(w for _, w in trips) <= 2
    assert sum(1 for r, w in trips if (r, w) == (1, 1)) >= 45  # most: GET head, PUT head
    stats = await cp.get_storage_stats(THREAD)
    every_save = sum(len(s.to_checkpoint()["messages"]) for s in states)  # messages stored
    assert stats["stored_bytes"] < every_save * 40  # ~30 compressed bytes per stored message


async def test_retired_objects_are_deleted(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage, max_chain_depth=2)
    await save_all(cp, grow(40), THREAD)
    head = await storage.thread(THREAD).head()
    assert head is not None
    log = storage.thread(THREAD).keys
    listed = []
    token = None
    while True:
        page = await storage.list_objects(log.log_prefix, start_after=token)
        listed += page.keys
        if not page.truncated:
            break
        token = page.keys[-1]
    assert sorted(listed) == sorted(log.log(n) for n in head.manifest.object_names())


async def test_concurrent_saves_to_one_thread_are_serialised(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage, max_chain_depth=1)
    states = grow(8)
    ids = await asyncio.gather(*(cp.save(s, THREAD) for s in states))
    assert sorted(await cp.list_checkpoints(THREAD, limit=20)) == sorted(ids)
    for cid, state in zip(ids, states, strict=True):
        assert await cp.load(THREAD, cid) == state

"""Corrupt, truncated and missing objects: the loads that need them fail, naming them;
saves go on (with a fresh snapshot when they must)."""

from __future__ import annotations

import pytest

from tests.delta.conftest import grow, message
from tulip_memory.delta import CorruptCheckpointError, DeltaCheckpointer, DeltaStorage
from tulip_memory.delta.manifest import Manifest
from tulip_memory.state import AgentState

THREAD = "case-7731-triage"


async def manifest(storage: DeltaStorage) -> Manifest:
    head = await storage.thread(THREAD).head()
    assert head is not None
    return head.manifest


async def damage(storage: DeltaStorage, key: str, how: str) -> None:
    data = (await storage.read_objects([key]))[key]
    assert data is not None
    if how == "truncate":
        await storage.write_objects({key: data[: len(data) // 2]})
    elif how == "flip":
        await storage.write_objects({key: data[:-7] + bytes([data[-7] ^ 0xFF]) + data[-6:]})
    elif how == "garbage":
        await storage.write_objects({key: b"<Error>SlowDown</Error>"})
    else:
        await storage.delete_objects([key])


@pytest.mark.parametrize("how", ["truncate", "flip", "missing"])
async def test_a_bad_history_object_fails_only_the_loads_that_need_it(
    storage: DeltaStorage, how: str
) -> None:
    cp = DeltaCheckpointer(storage, max_chain_depth=2)
    states = grow(12)
    ids = [await cp.save(s, THREAD) for s in states]
    m = await manifest(storage)
    victim = m.epochs[0].objects[-1]  # a level-1 object in the middle of the history
    key = storage.thread(THREAD).keys.log(victim.name)
    await damage(storage, key, how)
    # The writer keeps what it wrote decoded (its history cache): it needs no object
    # back. Another checkpointer (another process, or this one restarted) reads them.
    assert await cp.load(THREAD, ids[victim.first]) == states[victim.first]
    cp = DeltaCheckpointer(storage, max_chain_depth=2)
    for seq, (cid, state) in enumerate(zip(ids, states, strict=True)):
        if seq < victim.first or cid == ids[-1]:
            assert await cp.load(THREAD, cid) == state
        else:
            with pytest.raises(CorruptCheckpointError) as e:
                await cp.load(THREAD, cid)
            assert e.value.key == key and key in str(e.value)
    assert await cp.load(THREAD) == states[-1]
    more = AgentState(messages=[*states[-1].messages, message(12)])
    assert await cp.load(THREAD, await cp.save(more, THREAD)) == more


@pytest.mark.parametrize("how", ["truncate", "flip", "garbage"])
async def test_a_bad_merge_input_makes_the_save_a_snapshot(storage: DeltaStorage, how: str) -> None:
    cp = DeltaCheckpointer(storage, max_chain_depth=2)
    states = grow(12)
    ids = [await cp.save(s, THREAD) for s in states[:8]]
    m = await manifest(storage)
    victim = m.epochs[0].objects[-1]  # the 9th save merges it into a level-2 object
    assert victim.level == 1
    await damage(storage, storage.thread(THREAD).keys.log(victim.name), how)
    cp = DeltaCheckpointer(storage, max_chain_depth=2)  # one that must read the inputs
    ids += [await cp.save(s, THREAD) for s in states[8:]]
    meta = await cp.get_metadata(THREAD, ids[8])
    assert meta is not None and meta.is_full
    for i in range(8, 12):
        assert await cp.load(THREAD, ids[i]) == states[i]
    for i in range(victim.first):
        assert await cp.load(THREAD, ids[i]) == states[i]
    with pytest.raises(CorruptCheckpointError):
        await cp.load(THREAD, ids[victim.first])


@pytest.mark.parametrize("how", ["truncate", "flip", "garbage"])
async def test_a_bad_head_fails_loads_and_the_next_save_starts_over(
    storage: DeltaStorage, how: str
) -> None:
    cp = DeltaCheckpointer(storage)
    ids = [await cp.save(s, THREAD) for s in grow(8)]
    head_key = storage.thread(THREAD).keys.head
    await damage(storage, head_key, how)
    for cid in (None, ids[0]):
        with pytest.raises(CorruptCheckpointError) as e:
            await cp.load(THREAD, cid)
        assert e.value.key == head_key
    fresh = AgentState(messages=[message(0, "starting over")])
    new_id = await cp.save(fresh, THREAD)
    assert await cp.load(THREAD) == fresh
    assert await cp.list_checkpoints(THREAD) == [new_id]
    more = AgentState(messages=[*fresh.messages, message(1)])
    assert await cp.load(THREAD, await cp.save(more, THREAD)) == more
    assert await cp.load(THREAD, new_id) == fresh
    assert await cp.delete(THREAD)
    assert (await storage.list_objects("")).objects == ()


async def test_foreign_objects_under_the_prefix_are_ignored(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage)
    await cp.save(AgentState(), THREAD)
    await storage.write_objects(
        {"heads/zz/x": b"?", "heads/ab/NOT-A-SEGMENT": b"?", "heads/readme.txt": b"?"}
    )
    assert await cp.list_threads() == [THREAD]

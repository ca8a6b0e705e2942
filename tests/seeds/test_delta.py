"""``tulip.memory.delta``: the seed's storage contract and ``DeltaCheckpointer`` on it."""

from __future__ import annotations

import zlib

import pytest

from tulip_memory.delta import (
    CheckpointMetadata,
    CorruptCheckpointError,
    DeltaCheckpoint,
    DeltaCheckpointer,
    DeltaStorage,
    InMemoryDeltaStorage,
)
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState


class SeedDictStorage(DeltaStorage):
    """A storage written to the seed's four abstract methods, and nothing else."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, DeltaCheckpoint]] = {}
        self.stored = 0

    async def store(self, thread_id: str, checkpoint_id: str, checkpoint: DeltaCheckpoint) -> None:
        self.stored += 1
        self.records.setdefault(thread_id, {})[checkpoint_id] = checkpoint

    async def retrieve(self, thread_id: str, checkpoint_id: str) -> DeltaCheckpoint | None:
        return self.records.get(thread_id, {}).get(checkpoint_id)

    async def list_checkpoints(self, thread_id: str, limit: int = 10) -> list[CheckpointMetadata]:
        metas = [c.metadata for c in self.records.get(thread_id, {}).values()]
        return sorted(metas, key=lambda m: m.created_at, reverse=True)[:limit]

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        if thread_id not in self.records:
            return False
        if checkpoint_id is None:
            del self.records[thread_id]
            return True
        return self.records[thread_id].pop(checkpoint_id, None) is not None


def states(n: int) -> list[AgentState]:
    messages: list[Message] = []
    out = []
    for i in range(n):
        role = Role.USER if i % 2 == 0 else Role.ASSISTANT
        messages.append(Message(role=role, content=f"turn {i}: " + "words " * 30))
        out.append(AgentState(messages=list(messages), iterations=i, metadata={"turn": i}))
    return out


def test_a_storage_implementing_neither_contract_is_abstract() -> None:
    class Half(DeltaStorage):
        async def retrieve(self, thread_id: str, checkpoint_id: str) -> DeltaCheckpoint | None:
            return None

    with pytest.raises(TypeError, match="Can't instantiate abstract class Half"):
        Half()


async def test_delta_checkpointer_on_a_seed_storage_chains_deltas() -> None:
    storage = SeedDictStorage()
    cp = DeltaCheckpointer(storage, max_chain_depth=3)
    saved = [await cp.save(s, "t1") for s in states(9)]
    assert storage.stored == 9
    assert await cp.list_checkpoints("t1", limit=3) == saved[::-1][:3]
    for cid, state in zip(saved, states(9), strict=True):
        loaded = await cp.load("t1", cid)
        assert loaded is not None and loaded.to_checkpoint() == state.to_checkpoint()
    latest = await cp.load("t1")
    assert latest is not None and latest.metadata == {"turn": 8}
    depths = []
    for cid in saved:
        meta = await cp.get_metadata("t1", cid)
        assert meta is not None
        depths.append(meta.chain_depth)
    assert depths == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    record = storage.records["t1"][saved[1]]
    assert record.is_delta and record.metadata.parent_id == saved[0]
    assert not storage.records["t1"][saved[0]].is_delta
    stats = await cp.get_storage_stats("t1")
    assert (stats["total_checkpoints"], stats["full_checkpoints"]) == (9, 3)
    assert stats["delta_checkpoints"] == 6 and stats["compression_ratio"] > 1.0


async def test_deleting_a_base_keeps_what_was_built_on_it() -> None:
    storage = SeedDictStorage()
    cp = DeltaCheckpointer(storage, max_chain_depth=5)
    saved = [await cp.save(s, "t") for s in states(4)]
    assert await cp.delete("t", saved[0]) is True
    assert await cp.delete("t", saved[0]) is False
    for cid, state in zip(saved[1:], states(4)[1:], strict=True):
        loaded = await cp.load("t", cid)
        assert loaded is not None and loaded.to_checkpoint() == state.to_checkpoint()
    assert await cp.load("t", saved[0]) is None
    assert await cp.delete("t") is True and await cp.load("t") is None


async def test_copy_thread_on_a_seed_storage() -> None:
    cp = DeltaCheckpointer(SeedDictStorage())
    for s in states(3):
        await cp.save(s, "case-7731-triage")
    assert await cp.copy_thread("case-7731-triage", "case-7731-triage-replay") is True
    copy = await cp.load("case-7731-triage-replay")
    assert copy is not None and copy.metadata == {"turn": 2}
    assert await cp.copy_thread("nothing-here", "x") is False
    with pytest.raises(NotImplementedError, match="list_threads_page"):
        await cp.list_threads()


async def test_a_broken_chain_fails_the_load_not_the_next_save() -> None:
    storage = SeedDictStorage()
    cp = DeltaCheckpointer(storage)
    first, second = [await cp.save(s, "t") for s in states(2)]
    del storage.records["t"][first]
    with pytest.raises(CorruptCheckpointError, match="missing"):
        await cp.load("t", second)
    third = await cp.save(states(3)[2], "t")
    assert not storage.records["t"][third].is_delta
    loaded = await cp.load("t")
    assert loaded is not None and loaded.metadata == {"turn": 2}


async def test_in_memory_delta_storage_stores_what_it_is_given() -> None:
    storage = InMemoryDeltaStorage()
    meta = CheckpointMetadata(checkpoint_id="c1", thread_id="t", is_full=False, chain_depth=2)
    given = DeltaCheckpoint(metadata=meta, data=b"not even zlib", is_delta=True)
    await storage.store("t", "c1", given)
    assert await storage.retrieve("t", "c1") is given
    assert await storage.list_checkpoints("t") == [meta]
    other = DeltaCheckpoint(
        metadata=CheckpointMetadata(checkpoint_id="c2", thread_id="t"),
        data=zlib.compress(b"{}"),
        is_delta=False,
    )
    await storage.store("t", "c2", other)
    assert [m.checkpoint_id for m in await storage.list_checkpoints("t")] == ["c2", "c1"]
    assert await storage.list_checkpoints("t", limit=1) == [other.metadata]
    assert await storage.delete("t", "c1") is True and await storage.retrieve("t", "c1") is None
    assert await storage.delete("t") is True and await storage.list_checkpoints("t") == []
    assert await storage.delete("t") is False


async def test_default_checkpointer_is_in_memory_with_the_thread_lifecycle() -> None:
    cp = DeltaCheckpointer()
    assert isinstance(cp.storage, InMemoryDeltaStorage)
    assert (cp.max_chain_depth, cp.compression_level) == (5, 6)
    for thread in ("ticket-8912-refund", "case-7731-triage"):
        for s in states(2):
            await cp.save(s, thread)
    assert sorted(await cp.list_threads()) == ["case-7731-triage", "ticket-8912-refund"]
    await cp.copy_thread("case-7731-triage", "case-7731-triage-replay")
    state = await cp.load("case-7731-triage-replay")
    assert state is not None and len(state.messages) == 2
    assert await cp.delete("case-7731-triage-replay") is True
    assert "case-7731-triage-replay" not in await cp.list_threads()

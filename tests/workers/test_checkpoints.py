"""Checkpoints through the pipeline: ordered writes, read your writes, idempotency."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis

from tests.producer.queues import take_all, with_db
from tulip_memory.delta import DeltaCheckpointer, FileDeltaStorage
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_memory.store import PgMemory
from tulip_producer import AsyncReader, Producer, ProducerSettings
from tulip_wire.events import EventError, checkpoint_saved, encode
from tulip_wire.pending import PendingStates
from tulip_workers.checkpoints import SUPERSEDED, CheckpointWorker
from tulip_workers.event_worker import APPLIED, DEAD, DUPLICATE
from tulip_workers.retry import RetryPolicy

TABLE = f"ckpt_{uuid.uuid4().hex[:8]}"
DB = 12


def state(n: int) -> AgentState:
    msgs = [Message(role=Role.USER, content=f"turn {i}") for i in range(n)]
    return AgentState(messages=tuple(msgs), iterations=n, metadata={"n": n})


def event(thread: str, n: int, seq: int) -> tuple[str, str, str]:
    cid = uuid.uuid4().hex
    env = checkpoint_saved(thread, cid, state(n).to_checkpoint(), ts=time.time()).with_seq(seq)
    return env.id, cid, encode(env)


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PgMemory]:
    s = PgMemory(pg_dsn, table=TABLE, embedder=HashingEmbedder(384))
    yield s
    await s.close()


@pytest.fixture
def pending(redis_url: str) -> PendingStates:
    return PendingStates(redis.Redis.from_url(with_db(redis_url, DB)))


@pytest.fixture
def worker(store: PgMemory, pending: PendingStates, tmp_path: Path) -> CheckpointWorker:
    return CheckpointWorker(
        store=store,
        checkpointer=DeltaCheckpointer(FileDeltaStorage(tmp_path / "ckpt")),
        pending=pending,
        retry=RetryPolicy(attempts=2, base=0.01, cap=0.02),
    )


async def test_writes_once_and_clears_only_its_own_pending_state(
    worker: CheckpointWorker, pending: PendingStates
) -> None:
    thread = f"thread/{uuid.uuid4().hex}/ü"  # hostile characters are fine
    eid, cid, body = event(thread, 3, seq=1)
    pending.put(thread, cid, state(3).to_checkpoint(), ttl=60)
    assert await worker.handle(body, eid) == APPLIED
    assert pending.get(thread) is None
    assert await worker.checkpointer.load(thread) == state(3)
    assert await worker.handle(body, eid) == DUPLICATE
    assert await worker.checkpointer.list_checkpoints(thread) == [cid]
    # A newer state replaced the pending one before this event was written: it stays.
    eid2, _, body2 = event(thread, 4, seq=2)
    pending.put(thread, uuid.uuid4().hex, state(5).to_checkpoint(), ttl=60)
    assert await worker.handle(body2, eid2) == APPLIED
    waiting = pending.get(thread)
    assert waiting is not None and waiting.state == state(5).to_checkpoint()


async def test_an_older_checkpoint_never_becomes_the_head(worker: CheckpointWorker) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    old_id, _, old_body = event(thread, 1, seq=1)
    new_id, new_cid, new_body = event(thread, 2, seq=2)
    assert await worker.handle(new_body, new_id) == APPLIED
    assert await worker.handle(old_body, old_id) == SUPERSEDED  # a late redelivery
    assert await worker.checkpointer.load(thread) == state(2)
    assert await worker.checkpointer.list_checkpoints(thread) == [new_cid]


async def test_a_state_that_is_not_an_agent_state_is_a_dead_letter(
    worker: CheckpointWorker, store: PgMemory
) -> None:
    env = checkpoint_saved("t-bad", uuid.uuid4().hex, state(1).to_checkpoint(), ts=1.0)
    body = encode(env.with_seq(1)).replace('"iterations": 1', '"iterations": "many"')
    assert await worker.handle(body, env.id) == DEAD
    status = await AsyncReader(store).status(env.id)
    assert status.state == "dead" and "agent state" in (status.reason or "")


async def test_read_your_writes_before_any_worker_runs(
    redis_url: str, store: PgMemory, tmp_path: Path
) -> None:
    broker = with_db(redis_url, DB)
    settings = ProducerSettings(
        broker_url=broker, redis_url=broker, spool_dir=tmp_path / "spool", extract_shards=2,
        checkpoint_shards=2,
    )  # fmt: skip
    checkpointer = DeltaCheckpointer(FileDeltaStorage(tmp_path / "ckpt"))
    pending = PendingStates(redis.Redis.from_url(broker))
    reader = AsyncReader(store, checkpointer=checkpointer, pending=pending)
    thread = f"t-{uuid.uuid4().hex}"
    with Producer(settings) as producer:
        cid = producer.checkpoint_saved(thread, state(7))
        assert await reader.load(thread) == state(7)  # no worker has run
        assert await reader.load(thread, cid) == state(7)
        with pytest.raises(EventError, match="not JSON-serializable"):
            producer.checkpoint_saved(thread, {**state(1).to_checkpoint(), "metadata": {1j: 2}})
        with pytest.raises(EventError, match="survive JSON exactly"):
            producer.checkpoint_saved(thread, {**state(1).to_checkpoint(), "metadata": {1: 2}})
        assert await reader.load(thread) == state(7)  # refused saves changed nothing
    delivered = take_all(settings, lambda e: e.key == thread)
    assert [d.queue.split(".")[1] for d in delivered] == ["checkpoint"]
    assert delivered[0].envelope.payload is not None
    assert delivered[0].envelope.payload["checkpoint_id"] == cid
    # The worker writes it and clears the overlay; the store now answers.
    worker = CheckpointWorker(store=store, checkpointer=checkpointer, pending=pending)
    assert await worker.handle(delivered[0].args[0], delivered[0].task_id) == APPLIED
    assert pending.get(thread) is None
    assert await reader.load(thread) == state(7)

"""Checkpoints through the pipeline: ordered writes, read your writes, idempotency."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis

from tests.producer.queues import take_all, with_db
from tests.support.pg import app_store, dead_reason
from tests.support.services import Postgres
from tulip_memory.delta import DeltaCheckpointer, FileDeltaStorage, S3DeltaStorage
from tulip_memory.delta.tenants import tenant_checkpointer
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_memory.store import PgMemory
from tulip_producer import AsyncReader, Producer, ProducerSettings
from tulip_wire.events import EventError, checkpoint_saved, encode
from tulip_wire.pending import PendingStates
from tulip_workers.checkpoints import CheckpointWorker
from tulip_workers.deadletters import UNKNOWN_TENANT
from tulip_workers.event_worker import APPLIED, DEAD, DUPLICATE, SUPERSEDED
from tulip_workers.retry import RetryPolicy

TABLE = f"ckpt_{uuid.uuid4().hex[:8]}"
DB = 12
TENANT = "acme"


def state(n: int) -> AgentState:
    msgs = [Message(role=Role.USER, content=f"turn {i}") for i in range(n)]
    return AgentState(messages=tuple(msgs), iterations=n, metadata={"n": n})


def event(thread: str, n: int, seq: int, tenant: str = TENANT) -> tuple[str, str, str]:
    cid = uuid.uuid4().hex
    env = checkpoint_saved(tenant, thread, cid, state(n).to_checkpoint(), ts=time.time())
    return env.id, cid, encode(env.with_seq(seq))


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PgMemory]:
    s = app_store(pg_dsn, table=TABLE, embedder=HashingEmbedder(384))
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
    pending.put(TENANT, thread, cid, state(3).to_checkpoint(), ttl=60)
    assert await worker.handle(body, eid) == APPLIED
    assert pending.get(TENANT, thread) is None
    assert await worker.threads(TENANT).load(thread) == state(3)
    assert await worker.handle(body, eid) == DUPLICATE
    assert await worker.threads(TENANT).list_checkpoints(thread) == [cid]
    # A newer state replaced the pending one before this event was written: it stays.
    eid2, _, body2 = event(thread, 4, seq=2)
    pending.put(TENANT, thread, uuid.uuid4().hex, state(5).to_checkpoint(), ttl=60)
    assert await worker.handle(body2, eid2) == APPLIED
    waiting = pending.get(TENANT, thread)
    assert waiting is not None and waiting.state == state(5).to_checkpoint()


async def test_an_older_checkpoint_never_becomes_the_head(worker: CheckpointWorker) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    old_id, _, old_body = event(thread, 1, seq=1)
    new_id, new_cid, new_body = event(thread, 2, seq=2)
    assert await worker.handle(new_body, new_id) == APPLIED
    assert await worker.handle(old_body, old_id) == SUPERSEDED  # a late redelivery
    reader = AsyncReader(worker.store)
    assert (await reader.status(old_id, tenant=TENANT)).state == "superseded"
    assert (await reader.status(new_id, tenant=TENANT)).state == "applied"
    assert await worker.threads(TENANT).load(thread) == state(2)
    assert await worker.threads(TENANT).list_checkpoints(thread) == [new_cid]


async def test_a_state_that_is_not_an_agent_state_is_a_dead_letter(
    worker: CheckpointWorker, store: PgMemory, postgres: Postgres
) -> None:
    env = checkpoint_saved(TENANT, "t-bad", uuid.uuid4().hex, state(1).to_checkpoint(), ts=1.0)
    body = encode(env.with_seq(1)).replace('"iterations":1', '"iterations":"many"')
    assert await worker.handle(body, env.id) == DEAD
    # Too malformed to decode, so its tenant is not trusted: the row is _unknown's.
    status = await AsyncReader(store).status(env.id, tenant=UNKNOWN_TENANT)
    assert status.state == "dead" and (status.reason or "").startswith("EventError (")
    assert "agent state" in await dead_reason(postgres.admin_dsn, env.id)


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
        cid = producer.checkpoint_saved(thread, state(7), tenant=TENANT)
        assert await reader.load(thread, tenant=TENANT) == state(7)  # no worker has run
        assert await reader.load(thread, cid, tenant=TENANT) == state(7)
        bad = {**state(1).to_checkpoint(), "metadata": {1j: 2}}
        with pytest.raises(EventError, match="not JSON-serializable"):
            producer.checkpoint_saved(thread, bad, tenant=TENANT)
        with pytest.raises(EventError, match="survive JSON exactly"):
            producer.checkpoint_saved(thread, {**bad, "metadata": {1: 2}}, tenant=TENANT)
        assert await reader.load(thread, tenant=TENANT) == state(7)  # refused: no change
    delivered = take_all(settings, lambda e: e.key == f"{TENANT}\x1f{thread}")
    assert [d.queue.split(".")[1] for d in delivered] == ["checkpoint"]
    assert delivered[0].envelope.payload is not None
    assert delivered[0].envelope.payload["checkpoint_id"] == cid
    # The worker writes it and clears the overlay; the store now answers.
    worker = CheckpointWorker(store=store, checkpointer=checkpointer, pending=pending)
    assert await worker.handle(delivered[0].args[0], delivered[0].task_id) == APPLIED
    assert pending.get(TENANT, thread) is None
    assert await reader.load(thread, tenant=TENANT) == state(7)


async def test_the_same_thread_id_in_two_tenants_is_two_threads(
    redis_url: str, store: PgMemory, tmp_path: Path
) -> None:
    """Saved as tenant a: tenant b loads nothing, neither pending nor durable, and its
    own save of the same id neither sees nor overwrites a's."""
    broker = with_db(redis_url, DB)
    settings = ProducerSettings(
        broker_url=broker, redis_url=broker, spool_dir=tmp_path / "spool", checkpoint_shards=2
    )
    checkpointer = DeltaCheckpointer(FileDeltaStorage(tmp_path / "ckpt"))
    pending = PendingStates(redis.Redis.from_url(broker))
    reader = AsyncReader(store, checkpointer=checkpointer, pending=pending)
    thread = f"thread-7-{uuid.uuid4().hex}"
    with Producer(settings) as producer:
        producer.checkpoint_saved(thread, state(3), tenant="a")
        assert await reader.load(thread, tenant="a") == state(3)
        assert await reader.load(thread, tenant="b") is None  # pending: a's only
    delivered = take_all(settings, lambda e: e.key.endswith(thread))
    worker = CheckpointWorker(store=store, checkpointer=checkpointer, pending=pending)
    assert [await worker.handle(d.args[0], d.task_id) for d in delivered] == [APPLIED]
    assert pending.get("a", thread) is None  # durable now
    assert await reader.load(thread, tenant="a") == state(3)
    assert await reader.load(thread, tenant="b") is None
    assert await reader.load(thread, view="compacted", tenant="b") is None
    assert await checkpointer.load(thread) is None  # nothing at the tenant-less root
    # b's own thread of that id: its own history, a's untouched.
    eid, cid, body = event(thread, 5, seq=1, tenant="b")
    assert await worker.handle(body, eid) == APPLIED
    assert await reader.load(thread, tenant="b") == state(5)
    assert await reader.load(thread, tenant="a") == state(3)
    assert await worker.threads("a").list_threads() == [thread]
    assert await worker.threads("b").list_checkpoints(thread) == [cid]
    with pytest.raises(ValueError, match="separator"):
        await reader.load(thread, tenant="a\x1fb")


class CountedS3(S3DeltaStorage):
    """An S3 storage (heads with version tags) counting the objects read."""

    reads = 0

    async def read_objects(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        self.reads += len(keys)
        return await super().read_objects(keys)


async def test_a_run_of_deltas_onto_its_own_head_reads_nothing_and_loads_exactly(
    redis_url: str, store: PgMemory, tmp_path: Path, s3_endpoint: str
) -> None:
    """After the thread's first save, each delta appends onto the state this worker
    wrote last (no read of the store); every checkpoint still loads as it was saved,
    and a head another writer changed sends the next delta back to the reading path."""
    broker = with_db(redis_url, DB)
    settings = ProducerSettings(
        broker_url=broker, redis_url=broker, spool_dir=tmp_path / "spool", extract_shards=2,
        checkpoint_shards=2,
    )  # fmt: skip
    bucket = f"tulip-ckpt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(
        Bucket=bucket
    )
    options: dict[str, Any] = {"endpoint_url": s3_endpoint, "region_name": "us-east-1"}
    storage = CountedS3(bucket, "ck", **options)
    pending = PendingStates(redis.Redis.from_url(broker))
    worker = CheckpointWorker(store=store, checkpointer=DeltaCheckpointer(storage), pending=pending)
    thread = f"t-{uuid.uuid4().hex}"
    saved = [state(n) for n in range(1, 13)]
    with Producer(settings) as producer:
        ids = [producer.checkpoint_saved(thread, s, tenant=TENANT) for s in saved]
    delivered = take_all(settings, lambda e: e.key == f"{TENANT}\x1f{thread}")
    assert [("delta" in (d.envelope.payload or {})) for d in delivered] == [False] + [True] * 11
    reads = []
    for d in delivered:
        storage.reads = 0
        assert await worker.handle(d.args[0], d.task_id) == APPLIED
        reads.append(storage.reads)
    assert reads[2:] == [0] * 10
    threads = worker.threads(TENANT)
    for cid, s in zip(ids, saved, strict=True):
        assert await threads.load(thread, cid) == s
    other = DeltaCheckpointer(S3DeltaStorage(bucket, "ck", **options))  # another process
    await tenant_checkpointer(other, TENANT).save(state(20), thread)
    with Producer(settings) as producer:
        producer.bases.drop(f"{TENANT}\x1f{thread}")
        producer.checkpoint_saved(thread, saved[-1], tenant=TENANT)  # whole: a new base
        last = producer.checkpoint_saved(thread, state(13), tenant=TENANT)  # a delta onto it
    delivered = take_all(settings, lambda e: e.key == f"{TENANT}\x1f{thread}")
    for d in delivered:
        assert await worker.handle(d.args[0], d.task_id) == APPLIED
    assert await threads.load(thread) == state(13) == await threads.load(thread, last)

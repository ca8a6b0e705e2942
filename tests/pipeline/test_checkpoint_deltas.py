"""Deltas on the wire end to end: real checkpoint workers on S3 (moto), a 600-turn
thread saved through a stopped, started, SIGKILLed and restarted worker and by two
producers alternately; every checkpoint loads exactly, pending and durable."""

from __future__ import annotations

import asyncio
import time
import uuid

import boto3
import pytest

from tests.pipeline.conftest import SHARDS, Pipeline
from tests.support.pg import app_store
from tulip_memory.delta import DeltaCheckpointer, S3DeltaStorage
from tulip_memory.delta.tenants import tenant_checkpointer
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_producer.reader import AsyncReader, Reader
from tulip_wire.events import thread_key
from tulip_wire.pending import pending_states
from tulip_wire.routing import ShardRouter

T = "acme"
TURNS = 600


def conversation(n: int) -> list[AgentState]:
    """A support thread: a turn a save, metadata changing every turn, an edit of the
    memory block every 50th turn."""
    messages = [Message(role=Role.SYSTEM, content="memory v0")]
    out = []
    for i in range(n):
        if i % 50 == 49:
            messages[0] = Message(role=Role.SYSTEM, content=f"memory v{i}")
        role = Role.USER if i % 2 == 0 else Role.ASSISTANT
        messages.append(Message(role=role, content=f"turn {i}: where is parcel {i}? " * 3))
        out.append(AgentState(messages=tuple(messages), iterations=i + 1, metadata={"turn": i}))
    return out


@pytest.fixture
def s3_url(s3_endpoint: str) -> str:
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/threads"


@pytest.mark.timeout(900)
def test_a_600_turn_thread_of_deltas_through_killed_workers_and_two_producers(
    pipeline: Pipeline, s3_url: str, s3_endpoint: str
) -> None:
    env = {"TULIP_CHECKPOINT_URL": s3_url, "TULIP_S3_ENDPOINT_URL": s3_endpoint}
    thread = f"support-{uuid.uuid4().hex[:8]}"
    shard = ShardRouter("memory.checkpoint", SHARDS).shard(thread_key(T, thread))
    bucket, prefix = s3_url.removeprefix("s3://").split("/", 1)
    store = DeltaCheckpointer(S3DeltaStorage(bucket, prefix, endpoint_url=s3_endpoint))
    threads = tenant_checkpointer(store, T)
    pending = pending_states(pipeline.broker_url)
    assert pending is not None
    pg = app_store(pipeline.database_url, table=pipeline.table, embedder=HashingEmbedder(384))
    reader = Reader(AsyncReader(pg, checkpointer=store, pending=pending))
    states = conversation(TURNS)
    ids: list[str] = []

    def worker() -> None:
        pipeline.start_shard(shard, role="checkpoint", **env)

    def save(producer: object, n: int) -> None:
        ids.append(producer.checkpoint_saved(thread, states[n], tenant=T))  # type: ignore[attr-defined]
        assert reader.load(thread, tenant=T) == states[n]  # read your writes

    with pipeline.producer() as a, pipeline.producer() as b:
        for n in range(200):  # no worker yet: everything pending
            save(a, n)
        for n in range(0, 200, 17):
            assert reader.load(thread, ids[n], tenant=T) == states[n]
        worker()  # starts on a backlog of 200
        for n in range(200, 260):
            save(a, n)
        victim = next(w for w in pipeline.workers.started if w.name == f"checkpoint-{shard}")
        victim.kill()  # mid-apply: it is still working through the backlog
        for n in range(260, 400):
            save(a, n)
        worker()
        for n in range(400, TURNS):  # two producers alternately, each diffing its own last
            save(a if n % 2 == 0 else b, n)
        assert a.flush(timeout=30) and b.flush(timeout=30)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and (
        pending.exists(T, thread) or asyncio.run(threads.load(thread)) != states[-1]
    ):
        time.sleep(0.5)
    assert asyncio.run(threads.load(thread)) == states[-1]
    assert not pending.exists(T, thread)
    stored = asyncio.run(threads.list_checkpoints(thread, limit=TURNS + 10))
    assert sorted(stored) == sorted(ids)  # every checkpoint written once, none lost
    for n in [*range(0, TURNS, 5), TURNS - 2]:  # every checkpoint: the in-process test
        assert asyncio.run(threads.load(thread, ids[n])) == states[n]
    for n in range(0, TURNS, 37):
        assert reader.load(thread, ids[n], tenant=T) == states[n]
    reader.close()

"""Checkpoints as deltas on the wire: read your writes, base checks, two producers.

Real Redis (broker and pending lists), a real producer, the checkpoint worker in
process on a file store; the worker processes under SIGKILL are in
``tests/pipeline/test_checkpoint_deltas.py``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis

from tests.producer.queues import Delivered, take_all, with_db
from tests.support.pg import app_store, dead_reason
from tests.support.services import Postgres
from tulip_memory.delta import DeltaCheckpointer, FileDeltaStorage
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_memory.store import PgMemory
from tulip_producer import AsyncReader, Producer, ProducerSettings
from tulip_producer.bases import PublishedBases
from tulip_wire.events import checkpoint_delta, encode
from tulip_wire.pending import PendingStates
from tulip_workers.checkpoints import CheckpointWorker
from tulip_workers.event_worker import APPLIED, DEAD

TABLE = f"ckdelta_{uuid.uuid4().hex[:8]}"
DB = 13
TENANT = "acme"


def turns(n: int, who: str = "a") -> list[AgentState]:
    """``n`` states of one thread: a message per turn, a metadata field changing every
    turn, and every 50th turn an edit near the front (the memory block)."""
    messages = [Message(role=Role.SYSTEM, content="memory v0")]
    out = []
    for i in range(n):
        if i % 50 == 49:
            messages[0] = Message(role=Role.SYSTEM, content=f"memory v{i}")
        role = Role.USER if i % 2 == 0 else Role.ASSISTANT
        messages.append(Message(role=role, content=f"{who} turn {i}: " + "word " * (i % 13)))
        out.append(
            AgentState(messages=tuple(messages), iterations=i + 1, metadata={"turn": i, "w": who})
        )
    return out


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PgMemory]:
    s = app_store(pg_dsn, table=TABLE, embedder=HashingEmbedder(384))
    yield s
    await s.close()


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> ProducerSettings:
    broker = with_db(redis_url, DB)
    return ProducerSettings(
        broker_url=broker, redis_url=broker, spool_dir=tmp_path / "spool", checkpoint_shards=2
    )


@pytest.fixture
def pending(settings: ProducerSettings) -> PendingStates:
    return PendingStates(redis.Redis.from_url(settings.redis_url))


@pytest.fixture
def checkpointer(tmp_path: Path) -> DeltaCheckpointer:
    return DeltaCheckpointer(FileDeltaStorage(tmp_path / "ckpt"))


@pytest.fixture
def reader(store: PgMemory, checkpointer: DeltaCheckpointer, pending: PendingStates) -> AsyncReader:
    return AsyncReader(store, checkpointer=checkpointer, pending=pending)


@pytest.fixture
def worker(
    store: PgMemory, checkpointer: DeltaCheckpointer, pending: PendingStates
) -> CheckpointWorker:
    return CheckpointWorker(store=store, checkpointer=checkpointer, pending=pending)


def delivered(settings: ProducerSettings, thread: str) -> list[Delivered]:
    found = take_all(settings, lambda e: e.key == f"{TENANT}\x1f{thread}")
    return sorted(found, key=lambda d: d.envelope.seq or 0)


@pytest.mark.timeout(900)  # 1,200 loads of a 600-turn thread: minutes on a loaded machine
async def test_a_600_turn_thread_goes_as_tails_and_every_checkpoint_loads_exactly(
    settings: ProducerSettings,
    reader: AsyncReader,
    worker: CheckpointWorker,
    pending: PendingStates,
) -> None:
    thread = f"long-{uuid.uuid4().hex}"
    states = turns(600)
    with Producer(settings) as producer:
        ids = [producer.checkpoint_saved(thread, s, tenant=TENANT) for s in states]
        assert await reader.load(thread, tenant=TENANT) == states[-1]  # no worker has run
    sent = delivered(settings, thread)
    assert [d.envelope.payload["checkpoint_id"] for d in sent if d.envelope.payload] == ids
    payloads = [d.envelope.payload or {} for d in sent]
    assert "state" in payloads[0] and all("delta" in p for p in payloads[1:])
    sizes = [len(d.args[0]) for d in sent]
    assert max(sizes[1:]) < 2000 < len(json.dumps(states[-1].to_checkpoint()))
    edits = [p for i, p in enumerate(payloads) if i % 50 == 49]
    assert all(p["delta"]["patch"][1]["messages"][0] == "[" for p in edits)  # a patch, no tail
    for n in (0, 1, 48, 49, 50, 299, 599):  # pending only: nothing is durable yet
        assert await reader.load(thread, ids[n], tenant=TENANT) == states[n]
    # The worker runs for the first half and stops: pending and durable mixed.
    for d in sent[:300]:
        assert await worker.handle(d.args[0], d.task_id) == APPLIED
    assert len(pending.entries(TENANT, thread)) == 300  # the applied half trimmed
    for n, cid in enumerate(ids):
        assert await reader.load(thread, cid, tenant=TENANT) == states[n]
    # A worker restarted from nothing (no cache of any kind) takes the rest.
    storage = worker.checkpointer.storage
    assert isinstance(storage, FileDeltaStorage)
    store_again = DeltaCheckpointer(FileDeltaStorage(storage.base_dir))
    restarted = CheckpointWorker(store=worker.store, checkpointer=store_again, pending=pending)
    for d in sent[300:]:
        assert await restarted.handle(d.args[0], d.task_id) == APPLIED
    assert not pending.exists(TENANT, thread)
    threads = worker.threads(TENANT)
    for n, cid in enumerate(ids):
        assert await threads.load(thread, cid) == states[n]
        assert await reader.load(thread, cid, tenant=TENANT) == states[n]


async def test_a_lost_base_is_rebuilt_from_the_pending_list_and_not_lost(
    settings: ProducerSettings,
    reader: AsyncReader,
    worker: CheckpointWorker,
    pending: PendingStates,
    postgres: Postgres,
) -> None:
    thread = f"lost-{uuid.uuid4().hex}"
    states = turns(4)
    with Producer(settings) as producer:
        ids = [producer.checkpoint_saved(thread, s, tenant=TENANT) for s in states]
    first, second, third, fourth = delivered(settings, thread)
    # The first save never reaches a worker (a lost message): the store has no base
    # for the second, which the worker rebuilds from the pending list.
    assert await worker.handle(second.args[0], second.task_id) == APPLIED
    assert await worker.threads(TENANT).load(thread) == states[1]
    assert await worker.threads(TENANT).list_checkpoints(thread) == [ids[1]]
    # Neither the store nor the pending list has the base: dead-lettered, naming it.
    pending.clear_if(TENANT, thread, ids[3])
    env = checkpoint_delta(
        TENANT, thread, uuid.uuid4().hex, base=ids[2], patch=["{", {}, []],
        digest="0" * 16, ts=time.time(),
    ).with_seq((fourth.envelope.seq or 0) + 1)  # fmt: skip
    assert await worker.handle(encode(env), env.id) == DEAD
    reason = await dead_reason(postgres.admin_dsn, env.id)
    assert ids[2] in reason and "pending list does not rebuild it" in reason
    # The third (a delta onto the second, which the store has) and fourth still apply.
    assert await worker.handle(third.args[0], third.task_id) == APPLIED
    assert await worker.handle(fourth.args[0], fourth.task_id) == APPLIED
    assert await reader.load(thread, tenant=TENANT) == states[3]
    assert first.envelope.payload is not None and "state" in first.envelope.payload


async def test_a_delta_onto_a_base_the_store_holds_otherwise_is_never_merged(
    settings: ProducerSettings,
    worker: CheckpointWorker,
    pending: PendingStates,
    postgres: Postgres,
) -> None:
    """A forged delta naming a real base but made from another state: its digest does
    not match after applying, and with no pending list to rebuild from it is a dead
    letter naming the base; the thread's head is untouched."""
    thread = f"forged-{uuid.uuid4().hex}"
    states = turns(2)
    with Producer(settings) as producer:
        ids = [producer.checkpoint_saved(thread, s, tenant=TENANT) for s in states]
    sent = delivered(settings, thread)
    for d in sent:
        assert await worker.handle(d.args[0], d.task_id) == APPLIED
    patch = ["{", {"iterations": ["=", 99]}, []]
    env = checkpoint_delta(
        TENANT, thread, uuid.uuid4().hex, base=ids[1], patch=patch, digest="1" * 16,
        ts=time.time(),
    ).with_seq((sent[-1].envelope.seq or 0) + 1)  # fmt: skip
    assert await worker.handle(encode(env), env.id) == DEAD
    reason = await dead_reason(postgres.admin_dsn, env.id)
    assert f"base checkpoint {ids[1]}" in reason and "digest" in reason
    assert await worker.threads(TENANT).load(thread) == states[1]
    hostile = checkpoint_delta(
        TENANT, thread, uuid.uuid4().hex, base=ids[1], patch=["[", [[0, 10**9]]],
        digest="2" * 16, ts=time.time(),
    ).with_seq((sent[-1].envelope.seq or 0) + 2)  # fmt: skip
    assert await worker.handle(encode(hostile), hostile.id) == DEAD
    assert ids[1] in await dead_reason(postgres.admin_dsn, hostile.id)


async def test_two_producers_writing_one_thread_alternately_last_write_wins(
    settings: ProducerSettings,
    reader: AsyncReader,
    worker: CheckpointWorker,
    pending: PendingStates,
) -> None:
    """Each producer diffs against its own last save: every checkpoint is exactly what
    its writer saved, the head is the last write, never a mix of the two."""
    thread = f"two-{uuid.uuid4().hex}"
    a_states, b_states = turns(40, "a"), turns(40, "b")
    saved: list[tuple[str, AgentState]] = []
    with Producer(settings) as a, Producer(settings) as b:
        for i in range(40):
            for producer, states in ((a, a_states), (b, b_states)):
                cid: str = producer.checkpoint_saved(thread, states[i], tenant=TENANT)
                saved.append((cid, states[i]))
                assert await reader.load(thread, tenant=TENANT) == states[i]
    sent = delivered(settings, thread)
    assert sum("delta" in (d.envelope.payload or {}) for d in sent) == 78  # all but 2 firsts
    for cid, state in saved[::7]:
        assert await reader.load(thread, cid, tenant=TENANT) == state
    for d in sent:
        assert await worker.handle(d.args[0], d.task_id) == APPLIED
    assert await reader.load(thread, tenant=TENANT) == b_states[-1]
    for cid, state in saved:
        assert await worker.threads(TENANT).load(thread, cid) == state
    assert not pending.exists(TENANT, thread)


async def test_the_base_cache_is_bounded_and_an_evicted_thread_goes_whole(
    settings: ProducerSettings, reader: AsyncReader
) -> None:
    bases = PublishedBases(max_threads=2, max_bytes=1 << 20)
    threads = [f"evict-{i}-{uuid.uuid4().hex}" for i in range(3)]
    states = turns(3)
    with Producer(settings, bases=bases) as producer:
        for state in states[:2]:
            for t in threads:
                producer.checkpoint_saved(t, state, tenant=TENANT)
        assert len(bases) == 2
        for t in threads:  # each was evicted by the other two before its second save
            assert await reader.load(t, tenant=TENANT) == states[1]
    kinds = ["delta" in (d.envelope.payload or {}) for t in threads for d in delivered(settings, t)]
    assert kinds == [False, False] * 3


async def test_a_message_changed_in_place_after_its_save_goes_in_the_next_delta(
    settings: ProducerSettings, reader: AsyncReader, worker: CheckpointWorker
) -> None:
    """The producer encodes only the messages after the ones it published last (the
    same objects), yet a change inside one of those (its metadata dict, a number's
    type) is seen, published and loaded exactly, pending and durable."""
    thread = f"inplace-{uuid.uuid4().hex}"
    first = Message(role=Role.USER, content="hi", metadata={"score": 1, "tag": "a"})
    states = [AgentState(messages=(first,), iterations=1)]
    states.append(
        AgentState(messages=(first, Message(role=Role.ASSISTANT, content="yo")), iterations=2)
    )
    with Producer(settings) as producer:
        ids = [producer.checkpoint_saved(thread, s, tenant=TENANT) for s in states]
        known = producer.bases.get(f"{TENANT}\x1f{thread}")
        assert known is not None and known.known is not None
        assert known.known.messages == states[1].messages  # the next save appends to these
        first.metadata["score"] = 1.0  # == 1, other bytes
        states.append(
            AgentState(
                messages=(*states[1].messages, Message(role=Role.USER, content="x")), iterations=3
            )
        )
        ids.append(producer.checkpoint_saved(thread, states[2], tenant=TENANT))
        first.metadata["tag"] = "b"
        states.append(AgentState(messages=states[2].messages, iterations=4))
        ids.append(producer.checkpoint_saved(thread, states[3], tenant=TENANT))

    def exact(state: AgentState | None) -> str:
        assert state is not None
        return json.dumps(state.to_checkpoint(), sort_keys=True)

    assert exact(await reader.load(thread, tenant=TENANT)) == exact(states[3])
    assert json.loads(exact(await reader.load(thread, ids[2], tenant=TENANT)))["messages"][0][
        "metadata"
    ] == {"score": 1.0, "tag": "a"}
    for d in delivered(settings, thread):
        assert await worker.handle(d.args[0], d.task_id) == APPLIED
    threads = worker.threads(TENANT)
    assert exact(await threads.load(thread, ids[2])) == json.dumps(
        {**states[2].to_checkpoint(), "messages": [
            {**states[2].to_checkpoint()["messages"][0], "metadata": {"score": 1.0, "tag": "a"}},
            *states[2].to_checkpoint()["messages"][1:],
        ]}, sort_keys=True)  # fmt: skip
    assert exact(await threads.load(thread, ids[3])) == exact(states[3])

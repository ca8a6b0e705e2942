"""``tulip-memory dlq`` as an operator runs it, and ``QueuedMemoryManager``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from tests.producer.queues import take_all, with_db
from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.extract import ExtractionError
from tulip_memory.manager import Memory
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_memory.store import PgMemory
from tulip_producer import AsyncProducer, ProducerSettings
from tulip_producer.queued import QueuedMemoryManager
from tulip_producer.reader import AsyncReader
from tulip_wire.events import encode, session_ended
from tulip_workers.deadletters import DeadLetters
from tulip_workers.extraction import APPLIED, DEAD, ExtractionWorker
from tulip_workers.extractors import heuristic
from tulip_workers.retry import RetryPolicy

TABLE = f"dlq_{uuid.uuid4().hex[:8]}"
DB = 13  # a Redis database of this module's own


async def model_garbage(messages: Sequence[Message], existing: Sequence[Memory]) -> list[Memory]:
    raise ExtractionError("the model answered no JSON", attempts=1)


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PgMemory]:
    s = app_store(pg_dsn, table=TABLE, embedder=HashingEmbedder(384))
    yield s
    await s.close()


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tulip_ops.cli", "dlq", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def operator_env(postgres: Postgres, broker: str, tmp_path: Path) -> dict[str, str]:
    """What an operator's shell sets for ``tulip-memory dlq``."""
    return {
        "TULIP_DATABASE_ADMIN_URL": postgres.admin_dsn,
        "TULIP_BROKER_URL": broker,
        "TULIP_REDIS_URL": broker,
        "TULIP_SPOOL_DIR": str(tmp_path / "spool"),
        "TULIP_EXTRACT_SHARDS": "2",
    }


async def test_list_show_and_replay_dead_letters(
    store: PgMemory, postgres: Postgres, redis_url: str, tenant: str, tmp_path: Path
) -> None:
    ns = (tenant, "users", "u1")
    msgs = [Message(role=Role.USER, content="My favourite colour is green.")]
    env = session_ended(ns, "t", msgs, ts=time.time()).with_seq(7)
    failing = ExtractionWorker(
        store=store, extractor=model_garbage, retry=RetryPolicy(attempts=2, base=0.01, cap=0.02)
    )
    assert await failing.handle(encode(env)) == DEAD
    malformed_id = uuid.uuid4().hex
    assert await failing.handle('{"v": 1, "id": "x"}', malformed_id) == DEAD

    broker = with_db(redis_url, DB)
    settings = operator_env(postgres, broker, tmp_path)
    listed = cli(settings, "list", "--limit", "500")
    assert listed.returncode == 0, listed.stderr
    assert env.id in listed.stdout and "ExtractionError" in listed.stdout
    assert malformed_id in listed.stdout
    shown = cli(settings, "show", env.id)
    assert shown.returncode == 0 and encode(env) in shown.stdout

    refused = cli(settings, "replay", malformed_id)
    assert refused.returncode == 1 and "cannot be replayed" in refused.stderr
    missing = cli(settings, "replay", "f" * 32)
    assert missing.returncode == 1 and "no dead letter" in missing.stderr

    replayed = cli(settings, "replay", env.id)
    assert replayed.returncode == 0, replayed.stderr
    reader = AsyncReader(store)
    assert (await reader.status(env.id, tenant=tenant)).state == "pending"
    delivered = take_all(
        ProducerSettings(broker_url=broker, redis_url=broker, extract_shards=2),
        lambda e: e.id == env.id,
    )
    assert [d.envelope.seq for d in delivered] == [7]  # the original sequence number
    healthy = ExtractionWorker(store=store, extractor=heuristic)
    assert await healthy.handle(delivered[0].args[0]) == APPLIED
    assert (await reader.status(env.id, tenant=tenant)).state == "applied"
    assert env.id not in cli(settings, "list", "--limit", "500").stdout


async def test_two_tenants_dead_letters_of_one_event_id_stay_apart(
    store: PgMemory, postgres: Postgres, redis_url: str, tenant: str, tmp_path: Path
) -> None:
    """Tenant B's message names tenant A's event id (a forger can): each tenant gets a
    whole dead letter of that id, sees only its own, and a replay touches only one."""
    failing = ExtractionWorker(
        store=store, extractor=model_garbage, retry=RetryPolicy(attempts=2, base=0.01, cap=0.02)
    )
    other = f"{tenant}-b"
    msgs = [Message(role=Role.USER, content="My favourite colour is green.")]
    mine = session_ended((tenant, "users", "u1"), "t", msgs, ts=time.time()).with_seq(3)
    theirs = replace(
        session_ended((other, "users", "u9"), "t", msgs, ts=time.time()).with_seq(5), id=mine.id
    )
    bodies = {tenant: encode(mine), other: encode(theirs)}
    for body in bodies.values():
        assert await failing.handle(body, mine.id) == DEAD
    reader = AsyncReader(store)
    for t in bodies:
        assert (await reader.status(mine.id, tenant=t)).state == "dead"
        async with store.transaction(t) as tx:  # the application role, under RLS
            seen = await DeadLetters().find(tx.conn, mine.id)
        assert [(d.tenant, d.body) for d in seen] == [(t, bodies[t])]

    broker = with_db(redis_url, DB)
    settings = operator_env(postgres, broker, tmp_path)
    ambiguous = cli(settings, "replay", mine.id)
    assert ambiguous.returncode == 1
    assert repr(tenant) in ambiguous.stderr and repr(other) in ambiguous.stderr
    shown = cli(settings, "show", mine.id, "--tenant", other)
    assert shown.returncode == 0, shown.stderr
    assert bodies[other] in shown.stdout and bodies[tenant] not in shown.stdout
    replayed = cli(settings, "replay", mine.id, "--tenant", tenant)
    assert replayed.returncode == 0, replayed.stderr
    assert f"of tenant {tenant}" in replayed.stdout
    delivered = take_all(
        ProducerSettings(broker_url=broker, redis_url=broker, extract_shards=2),
        lambda e: e.id == mine.id,
    )
    assert [d.args[0] for d in delivered] == [bodies[tenant]]
    assert (await reader.status(mine.id, tenant=tenant)).state == "pending"
    assert (await reader.status(mine.id, tenant=other)).state == "dead"
    listed = cli(settings, "list", "--limit", "500").stdout
    assert f"tenant={other}" in listed and f"tenant={tenant}  " not in listed
    shown = cli(settings, "show", mine.id)  # the replayed letter is kept, marked
    assert shown.returncode == 1 and "name one with --tenant" in shown.stderr


async def test_queued_memory_manager_publishes_and_recalls(
    store: PgMemory, redis_url: str, tenant: str, tmp_path: Path
) -> None:
    broker = with_db(redis_url, DB)
    settings = ProducerSettings(
        broker_url=broker, redis_url=broker, spool_dir=tmp_path / "spool", extract_shards=2
    )
    reader = AsyncReader(store)
    producer = AsyncProducer(settings)
    try:
        ns = (tenant, "users", "u2")
        manager = QueuedMemoryManager(producer, reader, ns)
        state = AgentState(
            messages=(Message(role=Role.USER, content="Remember that my home city is Lima."),),
            metadata={"thread_id": "t-1"},
        )
        await manager.on_session_end(state)
        assert len(manager.published) == 1
        with pytest.raises(TimeoutError):
            await manager.drain(timeout=0.3)  # nothing applies it yet
        # A worker applies what the manager published.
        delivered = take_all(settings, lambda e: e.id == manager.published[0])
        worker = ExtractionWorker(store=store, extractor=heuristic)
        assert await worker.handle(delivered[0].args[0]) == APPLIED
        await manager.drain(timeout=10)
        later = AgentState(messages=(Message(role=Role.USER, content="Where is my home city?"),))
        injected = await manager.on_session_start(later)
        assert "Lima" in injected.messages[0].content
        assert injected.messages[-1].content == "Where is my home city?"
    finally:
        await producer.close()

"""The event ledger is the tenant's: rows under forced row-level security, status
answered only to the event's tenant, reasons redacted (issue 13, part 2)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.support.openai_server import FakeOpenAI, Reply
from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.extract import LLMExtractorConfig
from tulip_memory.messages import Message, Role
from tulip_memory.store import PgMemory
from tulip_producer.reader import AsyncReader
from tulip_wire.events import Envelope, encode, session_ended
from tulip_workers.extraction import APPLIED, DEAD, ExtractionWorker
from tulip_workers.extractors import LLMStep, heuristic
from tulip_workers.retry import RetryPolicy

FAST = RetryPolicy(attempts=2, base=0.01, cap=0.02)
LEDGER = "public.tulip_event_ledger"


def event(ns: tuple[str, ...], text: str, seq: int = 1) -> Envelope:
    msgs = [Message(role=Role.USER, content=text)]
    return session_ended(ns, "thread-1", msgs, ts=time.time()).with_seq(seq)


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PgMemory]:
    s = app_store(pg_dsn, table=f"ledger_{uuid.uuid4().hex[:8]}", embedder=HashingEmbedder(64))
    yield s
    await s.close()


async def test_pinned_to_a_tenant_the_app_role_sees_only_its_ledger_rows(
    store: PgMemory, pg_dsn: str
) -> None:
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    for tenant in (a, b):
        assert await worker.handle(encode(event((tenant, "u"), "My pet name is Rex."))) == APPLIED
    conn = await asyncpg.connect(pg_dsn)
    try:
        async with conn.transaction():
            await conn.execute("SELECT set_config('tulip.tenant', $1, true)", a)
            rows = await conn.fetch(f"SELECT tenant, key FROM {LEDGER}")
            assert {r["tenant"] for r in rows} == {a}
            assert await conn.fetchval(f"SELECT count(*) FROM {LEDGER} WHERE tenant = $1", b) == 0
        assert await conn.fetchval(f"SELECT count(*) FROM {LEDGER}") == 0  # nothing pinned
    finally:
        await conn.close()


async def test_status_answers_only_the_events_tenant(store: PgMemory) -> None:
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    env = event((a, "u"), "My favourite colour is green.")
    assert await worker.handle(encode(env)) == APPLIED
    reader = AsyncReader(store)
    assert (await reader.status(env.id, tenant=a)).state == "applied"
    other = await reader.status(env.id, tenant=b)
    unknown = await reader.status(uuid.uuid4().hex, tenant=b)
    assert (other.state, other.reason, other.memories) == (
        unknown.state,
        unknown.reason,
        unknown.memories,
    )
    assert other.state != "applied"


async def test_a_marker_in_model_garbage_reaches_no_ledger_row_or_log_line(
    store: PgMemory,
    postgres: Postgres,
    fake_openai: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:
    marker = f"MARKER{uuid.uuid4().hex}"
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    fake_openai.default_chat = lambda request: Reply(content=f"Sure! {marker} is what I think.")
    config = LLMExtractorConfig(
        model="openai/test-model", api_base=fake_openai.url, api_key="k", max_retries=0
    )
    worker = ExtractionWorker(store=store, extractor=LLMStep(config), retry=FAST)
    env = event((tenant, "users", "u1"), "hello there")
    # Every level a deployment logs at (litellm's and openai's own DEBUG output dumps raw
    # requests and responses: never run them at DEBUG in production).
    caplog.set_level(logging.INFO)
    assert await worker.handle(encode(env)) == DEAD
    status = await AsyncReader(store).status(env.id, tenant=tenant)
    assert status.state == "dead" and (status.reason or "").startswith("UnusableAnswer (")
    assert marker not in (status.reason or "")
    assert marker not in caplog.text
    assert any("UnusableAnswer" in r.getMessage() for r in caplog.records)
    admin = await asyncpg.connect(postgres.admin_dsn)
    try:
        in_ledger = await admin.fetchval(
            f"SELECT count(*) FROM {LEDGER} l WHERE strpos(row_to_json(l)::text, $1) > 0", marker
        )
        assert in_ledger == 0
        # The full reason lives in the tenant's dead letter, and only there.
        letter = await admin.fetchval(
            "SELECT reason FROM public.tulip_dead_letters WHERE event_id = $1", env.id
        )
        assert marker in letter
    finally:
        await admin.close()

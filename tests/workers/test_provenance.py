"""A memory keeps when it was said and the messages it came from: in its metadata
(what recall returns) and in indexed columns of its row."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

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
from tulip_wire.events import encode, session_ended
from tulip_workers.extraction import APPLIED, SUPERSEDED, ExtractionWorker
from tulip_workers.extractors import LLMStep, heuristic
from tulip_workers.retry import RetryPolicy

FAST = RetryPolicy(attempts=2, base=0.01, cap=0.02)
TABLE = f"provenance_{uuid.uuid4().hex[:8]}"
SESSION = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
STATED = datetime(2023, 5, 8, 14, 3, tzinfo=UTC)
TALK = [
    Message(role=Role.ASSISTANT, content="Hi Maya, how are you?", metadata={"id": "a1"}),
    Message(
        role=Role.USER,
        content="My favourite colour is green.",
        metadata={"id": "u1", "timestamp": STATED.isoformat()},
    ),
    Message(role=Role.ASSISTANT, content="Noted!", metadata={"id": "a2"}),
]


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PgMemory]:
    s = app_store(pg_dsn, table=TABLE, embedder=HashingEmbedder(384))
    yield s
    await s.close()


async def apply(worker: ExtractionWorker, ns: tuple[str, ...]) -> str:
    env = session_ended(ns, "chat", TALK, {"timestamp": SESSION.timestamp()}, ts=2e9)
    env = env.with_seq(1)
    assert await worker.handle(encode(env), env.id) == APPLIED
    return env.id


async def row_of(postgres: Postgres, ns: tuple[str, ...]) -> asyncpg.Record:
    conn = await asyncpg.connect(postgres.admin_dsn)
    try:
        rows = await conn.fetch(
            f"SELECT key, observed_at FROM {TABLE} WHERE tenant = $1"
            " AND metadata -> 'source_ids' @> $2::jsonb",
            ns[0],
            json.dumps(["u1"]),
        )
    finally:
        await conn.close()
    assert len(rows) == 1
    return rows[0]


async def test_the_heuristic_memory_keeps_its_message_and_time(
    store: PgMemory, postgres: Postgres, tenant: str
) -> None:
    ns = (tenant, "users", "maya")
    event_id = await apply(ExtractionWorker(store=store, extractor=heuristic, retry=FAST), ns)
    (memory,) = await AsyncReader(store).recall(ns, "favourite colour")
    assert memory.metadata["source_ids"] == ["u1"]
    assert memory.metadata["observed_at"] == STATED.isoformat()
    assert memory.metadata["source_event"] == event_id
    row = await row_of(postgres, ns)
    assert row["key"] == memory.key and row["observed_at"] == STATED


async def test_the_model_sees_ids_and_times_and_names_only_the_sessions_messages(
    store: PgMemory, postgres: Postgres, fake_openai: FakeOpenAI, tenant: str
) -> None:
    answer = {
        "memories": [
            {
                "type": "user",
                "key": "favourite-colour",
                "content": "Maya's favourite colour is green.",
                "sources": ["u1", "another-tenants-message", 7],
            },
            {"type": "user", "key": "greeted", "content": "Maya was greeted.", "sources": []},
        ]
    }
    fake_openai.script_chat(Reply(content=json.dumps(answer)))
    config = LLMExtractorConfig(
        model="openai/test-model", api_base=fake_openai.url, api_key="k", max_retries=0
    )
    ns = (tenant, "users", "maya")
    await apply(ExtractionWorker(store=store, extractor=LLMStep(config), retry=FAST), ns)
    prompt = fake_openai.requests_to("/v1/chat/completions")[-1].json["messages"][1]["content"]
    assert "User (id u1, Mon 8 May 2023 14:03 UTC): My favourite colour is green." in prompt
    assert "Assistant (id a1, Mon 8 May 2023 13:56 UTC): Hi Maya" in prompt
    memories = {m.key: m for m in await AsyncReader(store).recall(ns, "colour")}
    assert memories["favourite-colour"].metadata["source_ids"] == ["u1"]
    assert memories["favourite-colour"].metadata["observed_at"] == STATED.isoformat()
    # No source named: the session's last message's time.
    assert memories["greeted"].metadata["source_ids"] == []
    assert memories["greeted"].metadata["observed_at"] == SESSION.isoformat()
    assert (await row_of(postgres, ns))["key"] == "favourite-colour"


async def test_history_imported_behind_live_traffic_never_replaces_a_later_fact(
    store: PgMemory, tenant: str
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    ns = (tenant, "users", "maya")

    async def said(seq: int, year: int, text: str) -> str:
        when = datetime(year, 5, 8, tzinfo=UTC).timestamp()
        msgs = [Message(role=Role.USER, content=text)]
        env = session_ended(ns, "chat", msgs, {"timestamp": when}, ts=2e9).with_seq(seq)
        return await worker.handle(encode(env), env.id)

    assert await said(1, 2025, "My favourite colour is green.") == APPLIED  # live
    # Imported: its colour is kept out by the fence (so its outcome says so), its city lands.
    imported = await said(2, 2023, "My favourite colour is blue. My home city is Porto.")
    assert imported == SUPERSEDED
    found = {m.key: m.content for m in await AsyncReader(store).recall(ns, None)}
    assert found == {
        "favourite-colour": "The user's favourite colour is green.",
        "home-city": "The user's home city is Porto.",  # what only the history says
    }
    assert await said(3, 2026, "Actually, my favourite colour is red.") == APPLIED  # live again
    (colour,) = [
        m for m in await AsyncReader(store).recall(ns, None) if m.key == "favourite-colour"
    ]
    assert colour.content == "The user's favourite colour is red."

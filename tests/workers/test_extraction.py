"""The extraction service without Celery: ledger, fencing, retries, dead letters."""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import boto3
import numpy as np
import pytest

from tests.support.openai_server import FakeOpenAI, Reply
from tests.support.pg import app_store, dead_reason
from tests.support.services import Postgres
from tulip_memory.credentials import redact_url
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.extract import LLMExtractorConfig
from tulip_memory.manager import Memory
from tulip_memory.messages import Message, Role
from tulip_memory.store import PgMemory
from tulip_producer.reader import AsyncReader
from tulip_wire.claimcheck import ClaimCheckStore
from tulip_wire.events import Envelope, encode, session_ended
from tulip_workers.deadletters import UNKNOWN_TENANT
from tulip_workers.event_worker import DatabaseUnreachable
from tulip_workers.extraction import APPLIED, DEAD, DUPLICATE, SUPERSEDED, ExtractionWorker
from tulip_workers.extractors import LLMStep, heuristic
from tulip_workers.failures import is_unreachable
from tulip_workers.retry import RetryPolicy

FAST = RetryPolicy(attempts=3, base=0.01, cap=0.02)
TABLE = f"extraction_{uuid.uuid4().hex[:8]}"  # 384-wide: a table of this module's own


def event(ns: tuple[str, ...], *texts: str, seq: int = 1, ago: float = 0.0) -> Envelope:
    """A session saying ``texts``, published (and so observed) ``ago`` seconds ago."""
    msgs = [Message(role=Role.USER, content=t) for t in texts]
    return session_ended(ns, "thread-1", msgs, ts=time.time() - ago).with_seq(seq)


def llm_worker(store: PgMemory, fake: FakeOpenAI) -> ExtractionWorker:
    """A worker whose extractor is a model of the fake server, retried by the worker only."""
    config = LLMExtractorConfig(
        model="openai/test-model", api_base=fake.url, api_key="k", max_retries=0
    )
    return ExtractionWorker(store=store, extractor=LLMStep(config), retry=FAST)


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PgMemory]:
    s = app_store(pg_dsn, table=TABLE, embedder=HashingEmbedder(384))
    yield s
    await s.close()


@pytest.fixture
async def reader(store: PgMemory) -> AsyncReader:
    return AsyncReader(store)


async def test_applies_once_and_recall_finds_it(
    store: PgMemory, reader: AsyncReader, tenant: str
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    ns = (tenant, "users", "u1")
    env = event(ns, "My favourite colour is green. I work as a nurse.")
    assert (await reader.status(env.id, tenant=tenant)).state == "pending"
    assert await worker.handle(encode(env)) == APPLIED
    assert await worker.handle(encode(env)) == DUPLICATE
    status = await reader.status(env.id, tenant=tenant)
    assert status.state == "applied" and status.memories == 2
    recalled = await reader.recall(ns, "favourite colour", limit=5)
    assert "green" in recalled[0].content
    item = await store.get_item((*ns, recalled[0].type.value), recalled[0].key)
    assert item is not None and item.version == 1  # the redelivery wrote nothing


@pytest.mark.parametrize(
    ("green", "blue"),
    [((2, 0.0), (1, 0.0)), ((1, 0.0), (2, 86_400.0))],
    ids=["older-event", "newer-event-older-fact"],  # a late replay; history imported
)
async def test_a_write_the_fence_keeps_out_is_superseded(
    store: PgMemory,
    reader: AsyncReader,
    tenant: str,
    green: tuple[int, float],
    blue: tuple[int, float],
) -> None:
    """(seq, seconds ago) of each event: green, applied first, is the newer event, or
    states the fact observed later. The fence keeps it, and blue's outcome says so."""
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    ns = (tenant, "users", f"u2-{green[0]}")
    kept = event(ns, "Actually, my favourite colour is green.", seq=green[0], ago=green[1])
    late = event(ns, "My favourite colour is blue.", seq=blue[0], ago=blue[1])
    assert await worker.handle(encode(kept)) == APPLIED
    assert await worker.handle(encode(late)) == SUPERSEDED  # recorded, fenced
    recalled = await reader.recall(ns, "favourite colour")
    assert "green" in recalled[0].content and "blue" not in recalled[0].content
    assert (await reader.status(late.id, tenant=tenant)).state == "superseded"


async def test_an_older_event_whose_writes_all_land_is_applied(
    store: PgMemory, reader: AsyncReader, tenant: str
) -> None:
    """Late, but about a fact the newer event did not state: nothing was kept out."""
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    ns = (tenant, "users", "u8")
    newer = event(ns, "My favourite colour is green.", seq=2)
    older = event(ns, "I work as a nurse.", seq=1)
    assert await worker.handle(encode(newer)) == APPLIED
    assert await worker.handle(encode(older)) == APPLIED
    assert (await reader.status(older.id, tenant=tenant)).state == "applied"
    assert "nurse" in " ".join(m.content for m in await reader.recall(ns, "work"))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("not json", "not valid JSON"),
        (json.dumps({"v": 99, "id": "a" * 32}), "unknown schema version 99"),
        (json.dumps([1, 2]), "must be a JSON object"),
    ],
)
async def test_malformed_events_become_dead_letters(
    store: PgMemory, reader: AsyncReader, postgres: Postgres, body: str, reason: str
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    task_id = "b" * 24 + str(int(time.time() * 1e3))[-8:]
    assert await worker.handle(body, task_id) == DEAD
    event_id = task_id  # the broker's task id names the ledger row, not the body's id
    status = await reader.status(event_id, tenant=UNKNOWN_TENANT)
    assert status.state == "dead" and (status.reason or "").startswith("EventError (")
    conn = await asyncpg.connect(postgres.admin_dsn)
    try:
        row = await conn.fetchrow("SELECT * FROM tulip_dead_letters WHERE event_id = $1", event_id)
    finally:
        await conn.close()
    assert row is not None and bytes(row["raw"]) == body.encode() and reason in row["reason"]


POISON = {
    "a raw NUL byte in the JSON text": '{"v": 1, "id": "x\x00"}',
    "a JSON int instead of a string": 123,
    "JSON nested 100,000 levels deep": "[" * 100_000 + "]" * 100_000,
    "a lone surrogate in a valid event's text": None,  # built per test: needs a namespace
    "an escaped NUL in a valid event's text": None,
    "a body of another shape": {"args": [1, 2], "kwargs": {}},
}


def unchecked(text: str, ns: tuple[str, ...]) -> str:
    """An event as a forged or older client would send it: the JSON text written
    without the producer's check (``encode`` refuses what no Postgres column holds)."""
    return json.dumps(event(ns, text).to_dict(), ensure_ascii=False, separators=(",", ":"))


def poison_body(kind: str, ns: tuple[str, ...]) -> object:
    if kind == "a lone surrogate in a valid event's text":
        return unchecked("My favourite colour is \ud83d.", ns)
    if kind == "an escaped NUL in a valid event's text":
        return unchecked("My favourite colour is \x00.", ns)
    return POISON[kind]


@pytest.mark.parametrize("kind", list(POISON))
async def test_poison_is_a_dead_letter_with_its_bytes_and_the_shard_moves_on(
    store: PgMemory, reader: AsyncReader, postgres: Postgres, tenant: str, kind: str
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    ns = (tenant, "users", "p1")
    body = poison_body(kind, ns)
    task_id = uuid.uuid4().hex
    outcome = await worker.handle_durably(body, task_id)
    assert outcome.outcome == DEAD and outcome.reason
    assert (await reader.status(task_id, tenant=UNKNOWN_TENANT)).state == "dead"
    conn = await asyncpg.connect(postgres.admin_dsn)
    try:
        row = await conn.fetchrow("SELECT * FROM tulip_dead_letters WHERE event_id = $1", task_id)
    finally:
        await conn.close()
    assert row is not None and row["raw"] is not None and row["size"] == len(row["raw"])
    if isinstance(body, str):
        assert bytes(row["raw"]) == body.encode("utf-8", "surrogatepass")
    later = event(ns, "My pet name is Rex.", seq=2)
    assert await worker.handle(encode(later), later.id) == APPLIED


@contextlib.asynccontextmanager
async def refusing_full_letters(postgres: Postgres, marker: str) -> AsyncIterator[Any]:
    """An admin connection while the dead-letter table refuses every full letter whose
    body holds ``marker``: a real database refusal, as a content error would be."""
    admin = await asyncpg.connect(postgres.admin_dsn)
    check = f"refuse_{marker.replace('-', '_')}"
    await admin.execute(
        f"ALTER TABLE tulip_dead_letters ADD CONSTRAINT {check} "
        f"CHECK (raw IS NULL OR position('{marker}'::bytea in raw) = 0)"
    )
    try:
        yield admin
    finally:
        await admin.execute(f"ALTER TABLE tulip_dead_letters DROP CONSTRAINT {check}")
        await admin.close()


async def test_a_full_letter_that_cannot_be_stored_becomes_a_minimal_one(
    store: PgMemory, reader: AsyncReader, postgres: Postgres, tenant: str
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    await worker.handle("warm-up", uuid.uuid4().hex)  # the dead-letter table exists
    marker = f"refused-{uuid.uuid4().hex[:12]}"
    body = f'{{"v": 1, "id": "{marker}"}}'
    async with refusing_full_letters(postgres, marker) as admin:
        task_id = uuid.uuid4().hex
        outcome = await worker.handle_durably(body, task_id)
        row = await admin.fetchrow("SELECT * FROM tulip_dead_letters WHERE event_id = $1", task_id)
    assert outcome.outcome == DEAD and "minimal letter" in (outcome.reason or "")
    assert row is not None and row["raw"] is None and row["tenant"] == "_unknown"
    assert row["sha256"] == hashlib.sha256(body.encode()).hexdigest()
    assert row["size"] == len(body.encode()) and "field 'type'" in row["reason"]
    assert (await reader.status(task_id, tenant=UNKNOWN_TENANT)).state == "dead"


async def test_two_tenants_minimal_letters_of_one_event_id_are_both_kept(
    store: PgMemory, postgres: Postgres, tenant: str
) -> None:
    """Minimal letters all live in the unknown tenant: one whose event id another
    tenant's minimal letter holds is filed under its body's digest, never over it."""

    async def garbage(messages: Sequence[Message], existing: Sequence[Memory]) -> list[Memory]:
        raise ValueError("the model answered garbage")

    worker = ExtractionWorker(store=store, extractor=garbage, retry=FAST)
    await worker.handle("warm-up", uuid.uuid4().hex)  # the dead-letter table exists
    marker = f"refused-{uuid.uuid4().hex[:12]}"
    first = event((tenant, "users", "u1"), f"{marker} one")
    second = Envelope(**{**vars(event((f"{tenant}-b", "users", "u1"), f"{marker} two")),
                         "id": first.id})  # fmt: skip
    async with refusing_full_letters(postgres, marker) as admin:
        for env in (first, second):
            outcome = await worker.handle_durably(encode(env), env.id)
            assert outcome.outcome == DEAD and "minimal letter" in (outcome.reason or "")
        rows = await admin.fetch(
            "SELECT event_id FROM tulip_dead_letters WHERE tenant = $1 AND sha256 = ANY($2)",
            UNKNOWN_TENANT,
            [hashlib.sha256(encode(env).encode()).hexdigest() for env in (first, second)],
        )
    assert len(rows) == 2, rows
    assert first.id in {r["event_id"] for r in rows}


async def test_an_unreachable_model_is_waited_for_without_using_attempts(
    store: PgMemory, reader: AsyncReader, tenant: str
) -> None:
    calls = 0

    async def flaky(messages: Sequence[Message], existing: Sequence[Memory]) -> list[Memory]:
        nonlocal calls
        calls += 1
        if calls <= 5:  # more failures than attempts: each one a refused connection
            raise ConnectionRefusedError(111, "Connection refused")
        return await heuristic(messages, existing)

    worker = ExtractionWorker(store=store, extractor=flaky, retry=FAST)
    env = event((tenant, "users", "p2"), "My favourite colour is teal.")
    assert await worker.handle(encode(env), env.id) == APPLIED
    assert calls == 6 and (await reader.status(env.id, tenant=tenant)).state == "applied"


async def test_model_rate_limits_are_retried_in_place(
    store: PgMemory, reader: AsyncReader, fake_openai: FakeOpenAI, tenant: str
) -> None:
    answer = json.dumps(
        [{"type": "user", "key": "favourite-drink", "content": "Drinks matcha every morning"}]
    )
    fake_openai.script_chat(
        Reply(status=429, headers={"Retry-After": "0"}),
        Reply(status=503),
        Reply(content=answer),
    )
    worker = llm_worker(store, fake_openai)
    ns = (tenant, "users", "u3")
    env = event(ns, "I drink matcha every morning.")
    assert await worker.handle(encode(env)) == APPLIED
    assert [m.key for m in await reader.recall(ns, "drink")] == ["favourite-drink"]


async def test_model_garbage_every_time_is_dead_lettered_and_the_shard_moves_on(
    store: PgMemory, reader: AsyncReader, fake_openai: FakeOpenAI, tenant: str
) -> None:
    fake_openai.default_chat = lambda request: Reply(content="I am not JSON at all")
    worker = llm_worker(store, fake_openai)
    ns = (tenant, "users", "u4")
    poison = event(ns, "hello", seq=1)
    assert await worker.handle(encode(poison)) == DEAD
    status = await reader.status(poison.id, tenant=tenant)
    assert status.state == "dead" and (status.reason or "").startswith("UnusableAnswer (")
    assert len(fake_openai.requests_to("/v1/chat/completions")) == 1  # no paid retry
    good = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    assert await good.handle(encode(event(ns, "My pet name is Rex.", seq=2))) == APPLIED
    assert await good.handle(encode(poison)) == DUPLICATE  # redelivery of a dead letter


async def test_pruning_keeps_the_newest_memories_per_type(
    store: PgMemory, reader: AsyncReader, tenant: str
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST, max_memories=2)
    ns = (tenant, "users", "u5")
    for seq, text in enumerate(
        ["My favourite colour is red.", "My home city is Oslo.", "My pet name is Rex."], start=1
    ):
        assert await worker.handle(encode(event(ns, text, seq=seq))) == APPLIED
    keys = await store.list_keys((*ns, "user"))
    assert len(keys) == 2 and "favourite-colour" not in keys


async def test_a_body_claiming_another_event_id_is_refused(
    store: PgMemory, reader: AsyncReader, postgres: Postgres, tenant: str
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    real = event((tenant, "users", "u6"), "My favourite colour is red.")
    assert await worker.handle(encode(real), real.id) == APPLIED
    forged = event((tenant, "users", "u6"), "My favourite colour is black.", seq=9)
    task_id = uuid.uuid4().hex
    assert await worker.handle(encode(forged), task_id) == DEAD
    assert "does not match its task id" in await dead_reason(postgres.admin_dsn, task_id)
    assert (await reader.status(real.id, tenant=tenant)).state == "applied"
    recalled = await reader.recall((tenant, "users", "u6"), "favourite colour")
    assert "red" in recalled[0].content


async def test_one_structured_line_per_outcome_without_content(
    store: PgMemory, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    env = event((tenant, "users", "u7"), "My secret colour is mauve.")
    with caplog.at_level("INFO", logger="tulip.events"):
        await worker.handle(encode(env), env.id, "memory.extract.1")
        await worker.handle(encode(env), env.id, "memory.extract.1")
        await worker.handle("garbage", "c" * 32, "memory.extract.1")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "tulip.events"]
    assert [line["outcome"] for line in lines] == ["applied", "duplicate", "dead"]
    assert lines[0]["event_id"] == env.id and lines[0]["key"] == f"{tenant}/users/u7"
    assert lines[0]["queue"] == "memory.extract.1" and lines[0]["attempt"] == 1
    assert lines[0]["duration_ms"] >= 0 and "reason" in lines[2]
    assert "mauve" not in caplog.text


def dialogue(*pairs: tuple[str, str], tail: str | None = None) -> list[Message]:
    msgs: list[Message] = [Message(role=Role.SYSTEM, content="You are helpful.")]
    for q, a in pairs:
        msgs += [Message(role=Role.USER, content=q), Message(role=Role.ASSISTANT, content=a)]
    if tail:
        msgs.append(Message(role=Role.USER, content=tail))
    return msgs


async def test_completed_turns_are_indexed_with_the_event_once(
    store: PgMemory, reader: AsyncReader, tenant: str
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    ns = (tenant, "users", "u8")
    msgs = dialogue(
        ("How do I reset my router?", "Hold the reset button for ten seconds."),
        ("What is the capital of Peru?", "Lima is the capital of Peru."),
        ("Recommend a jazz album", "Try Kind of Blue by Miles Davis."),
        tail="thanks, bye",
    )
    env = session_ended(ns, "chat-9", msgs, {"user_id": "u8", "agent_id": "helpdesk"}, ts=1.0)
    env = env.with_seq(1)
    assert await worker.handle(encode(env), env.id) == APPLIED
    assert await worker.handle(encode(env), env.id) == DUPLICATE
    hits = await reader.recall_turns(ns, "capital city of Peru", top_k=10)
    assert len(hits) == 4  # the unanswered "thanks, bye" too, a turn of its own
    top = hits[0]
    assert top.turn["content"][0]["text"] == "What is the capital of Peru?"
    assert top.turn["reply"]["content"][0]["text"] == "Lima is the capital of Peru."
    assert top.metadata == {
        "namespace": list(ns),
        "thread_id": "chat-9",
        "event_id": env.id,
        "user_id": "u8",
        "agent_id": "helpdesk",
    }
    assert top.turn_index == 1 and top.score > hits[1].score
    tail = next(h for h in hits if h.text == "thanks, bye")
    assert "reply" not in tail.turn and tail.turn_index == 3
    assert await reader.recall_turns(ns, "router", top_k=10, threshold=0.99) == []


async def test_turn_recall_is_complete_and_exact_beside_other_tenants(
    store: PgMemory, reader: AsyncReader, tenant: str
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    topics = ["router", "jazz", "tax", "garden", "chess", "python", "bread", "rain"]
    for other in range(40):
        pairs = [(f"question {other} about {t}", f"answer about {t}") for t in topics]
        env = session_ended((f"other-{tenant}-{other}", "u"), "t", dialogue(*pairs), ts=1.0)
        await worker.handle(encode(env.with_seq(1)), env.id)
    ns = (tenant, "users", "u9")
    pairs = [(f"my {t} question", f"my {t} answer") for t in topics]
    env = session_ended(ns, "t", dialogue(*pairs), ts=1.0).with_seq(1)
    await worker.handle(encode(env), env.id)
    hits = await reader.recall_turns(ns, "garden and bread", top_k=50)
    assert len(hits) == len(topics)
    emb = HashingEmbedder(384)
    texts = [f"{q}\n{a}" for q, a in pairs]
    m, q = emb.embed(texts), emb.embed(["garden and bread"])[0]
    sims = (m @ q) / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))
    # Exactly the cosine ranking (ties may come in either order).
    by_text = dict(zip(texts, sims, strict=True))
    assert [h.score for h in hits] == pytest.approx(sorted(sims, reverse=True), abs=1e-5)
    assert all(h.score == pytest.approx(by_text[h.text], abs=1e-5) for h in hits)


@pytest.mark.parametrize("limit", [0, -1, 1001, 10**6, True])
async def test_recall_limits_are_capped_with_a_clear_error(
    reader: AsyncReader, tenant: str, limit: int
) -> None:
    with pytest.raises(ValueError, match=r"limit must be an integer in 1\.\.1000"):
        await reader.recall((tenant, "u"), "colour", limit=limit)
    with pytest.raises(ValueError, match=r"top_k must be an integer in 1\.\.1000"):
        await reader.recall_turns((tenant, "u"), "colour", top_k=limit)
    assert await reader.recall((tenant, "u"), "colour", limit=1000) == []


async def test_an_unreachable_database_is_named_with_its_setting(tmp_path: Path) -> None:
    dsn = f"postgresql://app:s3cret@/tulip?host={tmp_path / 'no-such-dir'}"
    store = PgMemory(dsn, table=TABLE, embedder=HashingEmbedder(384))
    worker = ExtractionWorker(
        store=store, extractor=heuristic, retry=FAST, database=redact_url(dsn)
    )
    try:
        with pytest.raises(DatabaseUnreachable) as raised:
            await worker.handle(encode(event(("t", "u"), "hello")))
    finally:
        await store.close()
    text = str(raised.value)
    assert "(TULIP_DATABASE_URL)" in text and str(tmp_path / "no-such-dir") in text
    assert "s3cret" not in text and is_unreachable(raised.value)


@pytest.mark.parametrize("backend", ["file", "s3"])
async def test_a_claim_over_the_limit_or_its_stated_size_is_a_dead_letter(
    store: PgMemory,
    reader: AsyncReader,
    postgres: Postgres,
    tenant: str,
    tmp_path: Path,
    backend: str,
    request: pytest.FixtureRequest,
) -> None:
    if backend == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = f"claims-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)
        claims = ClaimCheckStore.from_url(f"s3://{bucket}/claims", endpoint_url=endpoint)
    else:
        claims = ClaimCheckStore.from_url(f"file://{tmp_path}/claims")
    worker = ExtractionWorker(
        store=store, extractor=heuristic, retry=FAST, claims=claims, max_claim_bytes=2000
    )
    ns = (tenant, "users", "claims")

    def claimed(text: str, seq: int, pad: int = 0) -> Envelope:
        env = event(ns, text + " " * pad, seq=seq)
        return env.with_ref(claims.put(env.id, json.dumps(env.payload).encode()))

    fits = claimed("My favourite colour is teal.", 1)
    over = claimed("My favourite colour is black.", 2, pad=3000)
    grown = claimed("My favourite colour is white.", 3)
    assert grown.payload_ref is not None
    claims.objects.put(f"{grown.id[:2]}/{grown.id}.json", b"[" * 10_000_000)
    assert await worker.handle(encode(fits), fits.id) == APPLIED
    assert await worker.handle(encode(over), over.id) == DEAD
    assert await worker.handle(encode(grown), grown.id) == DEAD
    assert "over the 2000 of TULIP_MAX_CLAIM_BYTES" in await dead_reason(
        postgres.admin_dsn, over.id
    )
    size = grown.payload_ref.size
    assert f"more than the {size} bytes its reference says" in await dead_reason(
        postgres.admin_dsn, grown.id
    )
    recalled = await reader.recall(ns, "favourite colour")
    assert "teal" in recalled[0].content


async def test_a_message_reusing_a_dead_letters_id_is_filed_under_its_digest(
    store: PgMemory, reader: AsyncReader, postgres: Postgres, tenant: str, tmp_path: Path
) -> None:
    """A forger names someone's dead letter. Its letter, in the unknown tenant, goes
    under a digest of its body when that tenant holds a letter of the id; another
    tenant's letter of the id is no obstacle (letters are keyed by tenant and id). The
    named letter stays as it was, and nothing stops the shard."""
    claims = ClaimCheckStore.from_url(f"file://{tmp_path}/claims")
    worker = ExtractionWorker(
        store=store, extractor=heuristic, retry=FAST, claims=claims, max_claim_bytes=100
    )
    env = event((tenant, "users", "victim"), "x" * 500)
    owned = env.with_ref(claims.put(env.id, json.dumps(env.payload).encode()))  # over the limit
    malformed = event((tenant, "users", "victim"), "y" * 500)  # no tenant of its own
    for victim, holder in ((owned, tenant), (malformed, UNKNOWN_TENANT)):
        body = encode(victim) if victim is owned else encode(victim).replace('"v":1', '"v":9')
        assert await worker.handle(body, victim.id) == DEAD
        before = await dead_reason(postgres.admin_dsn, victim.id, tenant=holder)
        raw = b'{"not": "a task"}' + uuid.uuid4().bytes
        refused = await worker.refused(raw, victim.id, "NotRegistered: no task 'x'")
        assert refused.outcome == DEAD
        assert (refused.event_id == victim.id) is (holder != UNKNOWN_TENANT)
        again = await worker.refused(raw, victim.id, "NotRegistered: no task 'x'")
        assert again.event_id == refused.event_id  # the same message: its own letter
        handled = await worker.handle_durably("garbage " + uuid.uuid4().hex, victim.id)
        assert handled.outcome == DEAD and handled.event_id != victim.id
        assert await dead_reason(postgres.admin_dsn, victim.id, tenant=holder) == before
    assert (await reader.status(owned.id, tenant=tenant)).state == "dead"


async def test_model_items_postgres_cannot_store_are_dropped_not_the_event(
    store: PgMemory, reader: AsyncReader, fake_openai: FakeOpenAI, tenant: str
) -> None:
    """A model's NUL or lone surrogate (JSON ``\\u0000``, ``\\ud800``) in one item
    costs that item (or its optional field), not the session's other memories: the
    write of such text would fail every attempt and dead-letter the whole event."""
    good = {"type": "user", "key": "pet", "content": "The user's dog is Rex.", "why": "x\ud800"}
    answer = json.dumps(
        [
            {"type": "user", "key": "nul", "content": "Likes \u0000 tea"},
            {"type": "user", "key": "lone", "content": "Likes caf\udce9"},
            good,
            {**good, "key": "sources", "sources": ["m1", "m\u0000"], "how_to_apply": "\u0000"},
        ]
    )
    fake_openai.script_chat(Reply(content=answer))
    worker = llm_worker(store, fake_openai)
    ns = (tenant, "users", "u9")
    env = event(ns, "My dog is Rex.")
    assert await worker.handle(encode(env)) == APPLIED
    assert sorted(m.key for m in await reader.recall(ns, "dog Rex")) == ["pet", "sources"]


async def test_an_answer_holds_at_most_the_kept_memories_of_a_type_in_its_order(
    store: PgMemory, reader: AsyncReader, fake_openai: FakeOpenAI, tenant: str
) -> None:
    # 80 memories of one type where the namespace keeps 50: the model's first 50 are
    # embedded and written (not the 50 first by key the prune would keep of all 80).
    items = [
        {"type": "user", "key": f"fact-{i:02d}", "content": f"The user likes tea number {i}."}
        for i in range(79, -1, -1)
    ]
    fake_openai.script_chat(Reply(content=json.dumps(items)))
    worker = llm_worker(store, fake_openai)
    ns = (tenant, "users", "u10")
    env = event(ns, "I like a lot of teas.")
    assert await worker.handle(encode(env)) == APPLIED
    keys = await store.list_keys((*ns, "user"), limit=1_000)
    assert sorted(keys) == [f"fact-{i:02d}" for i in range(30, 80)]


async def test_a_message_the_producer_would_refuse_is_a_dead_letter_at_once(
    store: PgMemory, reader: AsyncReader, postgres: Postgres, tenant: str
) -> None:
    """``content=123`` past the producer (a broker client of its own): the same check
    refuses it, on the first attempt, naming the field (it was an AttributeError four
    times)."""
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    body = json.loads(encode(event((tenant, "users", "u7"), "hi")))
    body["payload"]["messages"][0]["content"] = 123
    assert await worker.handle(json.dumps(body), body["id"]) == DEAD
    reason = await dead_reason(postgres.admin_dsn, body["id"])
    assert "payload.messages[0].content must be a string, got int" in reason
    assert (await reader.status(body["id"], tenant=UNKNOWN_TENANT)).state == "dead"

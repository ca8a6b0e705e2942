"""Broker messages are checked, not trusted: forged envelopes are dead letters with a
reason, and the victim's own later events still apply (real Postgres and Redis)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.producer.queues import take_all, with_db
from tests.support.pg import dead_reason
from tests.support.services import STARTED
from tests.workers.test_extraction import event, store  # noqa: F401 - the fixture
from tulip_memory.store import PgMemory
from tulip_producer import Producer, ProducerSettings
from tulip_producer.reader import AsyncReader
from tulip_wire.claimcheck import ClaimCheckStore
from tulip_wire.events import Envelope, encode, namespace_key
from tulip_wire.signing import Signer, forged_event_id
from tulip_workers.deadletters import UNKNOWN_TENANT
from tulip_workers.extraction import APPLIED, DEAD, DUPLICATE, SUPERSEDED, ExtractionWorker
from tulip_workers.extractors import heuristic
from tulip_workers.retry import RetryPolicy

FAST = RetryPolicy(attempts=2, base=0.01, cap=0.02)
KEY = "k" * 40
HUGE_SEQ = 10**15
said = event  # a session.ended event of one user message per text, with its seq


def admin_dsn() -> str:
    """The session's administrator DSN (full dead-letter reasons are only there)."""
    return STARTED[-1].admin_dsn


@pytest.fixture
def claims(tmp_path: Path) -> ClaimCheckStore:
    return ClaimCheckStore.from_url(f"file://{tmp_path / 'claims'}")


@pytest.fixture
def checked(store: PgMemory, claims: ClaimCheckStore) -> ExtractionWorker:  # noqa: F811
    """An extraction worker fetching claim checks from ``claims``."""
    return ExtractionWorker(store=store, extractor=heuristic, claims=claims, retry=FAST)


def by_ref(env: Envelope, claims: ClaimCheckStore) -> Envelope:
    """``env`` claim-checked, as a producer over its size limit sends it."""
    return env.with_ref(claims.put(env.id, json.dumps(env.payload).encode()))


async def colour(reader: AsyncReader, ns: tuple[str, ...]) -> str:
    found = await reader.recall(ns, "favourite colour", limit=1)
    return found[0].content if found else ""


async def test_a_claim_check_reused_by_another_event_is_a_dead_letter(
    checked: ExtractionWorker, claims: ClaimCheckStore, tenant: str
) -> None:
    worker, reader = checked, AsyncReader(checked.store)
    victim_ns = (tenant, "users", "victim")
    genuine = by_ref(said(victim_ns, "My favourite colour is green.", seq=1), claims)
    # The forger copies the victim's payload_ref into an event of its own, with the
    # victim's key and a sequence number no genuine event will ever reach.
    forged = Envelope(
        type=genuine.type, key=genuine.key, payload=None, payload_ref=genuine.payload_ref,
        seq=HUGE_SEQ, ts=time.time(),
    )  # fmt: skip
    assert await worker.handle(encode(forged), forged.id) == DEAD
    status = await reader.status(forged.id, tenant=tenant)
    assert status.state == "dead"
    assert f"claim check of event {genuine.id}" in await dead_reason(admin_dsn(), forged.id)
    assert await worker.handle(encode(genuine), genuine.id) == APPLIED
    later = said(victim_ns, "Actually, my favourite colour is amber.", seq=2)
    assert await worker.handle(encode(later), later.id) == APPLIED  # not superseded
    assert "amber" in await colour(reader, victim_ns)


async def test_a_claimed_payload_must_produce_the_envelope_key(
    checked: ExtractionWorker, claims: ClaimCheckStore, tenant: str
) -> None:
    """Routed, sequenced and fenced as the forger's own key, writing the victim's."""
    worker, reader = checked, AsyncReader(checked.store)
    victim_ns, own_ns = (tenant, "users", "victim"), (f"{tenant}-x", "users", "forger")
    payload = said(victim_ns, "My favourite colour is black.", seq=1).payload
    forged = Envelope(type="session.ended", key=namespace_key(own_ns), payload=None, seq=HUGE_SEQ,
                      ts=time.time())  # fmt: skip
    forged = forged.with_ref(claims.put(forged.id, json.dumps(payload).encode()))
    assert await worker.handle(encode(forged), forged.id) == DEAD
    assert (await reader.status(forged.id, tenant=f"{tenant}-x")).state == "dead"
    reason = await dead_reason(admin_dsn(), forged.id)
    assert "key does not match the payload's namespace" in reason
    assert await colour(reader, victim_ns) == ""  # nothing written
    genuine = said(victim_ns, "My favourite colour is teal.", seq=1)
    assert await worker.handle(encode(genuine), genuine.id) == APPLIED
    assert "teal" in await colour(reader, victim_ns)


async def test_signing_workers_refuse_unsigned_and_badly_signed_events(
    store: PgMemory,  # noqa: F811
    tenant: str,
) -> None:
    signer, other = Signer((KEY.encode(),)), Signer((("o" * 40).encode(),))
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST, signer=signer)
    reader = AsyncReader(store)
    ns = (tenant, "users", "victim")
    genuine = signer.sign(said(ns, "My favourite colour is green.", seq=1))
    # A forgery reusing the genuine event's id, with a huge seq, unsigned or signed
    # with another key, or the genuine event with its payload changed after signing.
    unsigned = said(ns, "My favourite colour is red.", seq=HUGE_SEQ)
    unsigned = Envelope(**{**unsigned.__dict__, "id": genuine.id})
    wrong_key = other.sign(unsigned)
    tampered = json.loads(encode(genuine))
    tampered["payload"]["messages"][0]["content"] = "My favourite colour is red."
    cases = [
        (encode(unsigned), "unsigned event refused"),
        (encode(wrong_key), "bad signature"),
        (json.dumps(tampered), "bad signature"),
    ]
    for body, reason in cases:
        assert await worker.handle(body, genuine.id) == DEAD
        dead = await reader.status(forged_event_id(body), tenant=UNKNOWN_TENANT)
        assert dead.state == "dead", dead
        assert reason in await dead_reason(admin_dsn(), forged_event_id(body))
    assert (await reader.status(genuine.id, tenant=tenant)).state == "pending"  # not burned
    assert await worker.handle(encode(genuine), genuine.id) == APPLIED
    later = signer.sign(said(ns, "Actually, my favourite colour is amber.", seq=2))
    assert await worker.handle(encode(later), later.id) == APPLIED  # the fence held
    assert "amber" in await colour(reader, ns)


async def test_producers_sign_inline_and_claim_checked_events_a_worker_applies(
    store: PgMemory,  # noqa: F811
    redis_url: str,
    tmp_path: Path,
    tenant: str,
) -> None:
    broker = with_db(redis_url, 13)
    settings = ProducerSettings(
        broker_url=broker, spool_dir=tmp_path / "spool", signing_key=f"old-{KEY},{KEY}",
        max_event_bytes=2048,
    )  # fmt: skip
    assert KEY not in repr(settings)
    ns = (tenant, "users", "u1")
    with Producer(settings) as producer:
        small = producer.session_ended(ns, "t", [{"role": "user", "content": "I live in Oslo."}])
        big_text = "My favourite colour is green. " + "Lorem ipsum. " * 400
        big = producer.session_ended(ns, "t", [{"role": "user", "content": big_text}])
    delivered = take_all(settings, lambda e: e.key == namespace_key(ns))
    assert [d.task_id for d in delivered] == [small, big]
    assert delivered[1].envelope.payload_ref is not None  # claim-checked, and signed
    claims = ClaimCheckStore.from_url(settings.claim_check_url)
    # Rotation: the worker knows the producer's first key among its own.
    worker = ExtractionWorker(store=store, extractor=heuristic, claims=claims, retry=FAST,
                              signer=Signer((KEY.encode(), f"old-{KEY}".encode())))  # fmt: skip
    assert [await worker.handle(d.args[0], d.task_id) for d in delivered] == [APPLIED, APPLIED]
    assert "green" in await colour(AsyncReader(store), ns)


async def test_a_write_lost_to_the_fence_is_superseded_never_applied(
    store: PgMemory,  # noqa: F811
    tenant: str,
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic, retry=FAST)
    ns = (tenant, "users", "u3")
    newer = said(ns, "My favourite colour is green.", seq=5)
    older = said(ns, "My favourite colour is blue.", seq=4)
    assert await worker.handle(encode(newer), newer.id) == APPLIED
    assert await worker.handle(encode(older), older.id) == SUPERSEDED
    reader = AsyncReader(store)
    assert (await reader.status(older.id, tenant=tenant)).state == "superseded"
    assert (await reader.status(newer.id, tenant=tenant)).state == "applied"
    assert await worker.handle(encode(older), older.id) == DUPLICATE  # done, redelivered
    assert "green" in await colour(reader, ns)


def test_a_short_signing_key_is_refused_without_echoing_it() -> None:
    with pytest.raises(ValueError, match="TULIP_EVENT_SIGNING_KEY") as e:
        ProducerSettings(broker_url="redis://h:1/0", signing_key="short-secret")
    assert "short-secret" not in str(e.value)

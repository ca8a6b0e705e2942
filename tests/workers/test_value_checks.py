"""How often one extraction event's namespace is checked and its JSON parsed, per side.

The producer checks a session's namespace where it enters (``Producer.session_ended``) and
the worker parses the delivered body where it arrives (``ExtractionWorker.handle``); each
further check or parse of the same value is work a trusted value would not repeat. The
target is one of each per side (issue 45); the bounds below are what the code does today
(measured, see docs/architecture.md), so a change can lower them but not raise them.

Not counted here: the parses of the Celery transport before ``handle`` (kombu's decode of
the message, the reliable-Redis restore and the ordering key's ``envelope_key``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.producer.queues import take_all, with_db
from tests.support.checks import Checks, counting
from tests.support.pg import app_store
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.messages import Message, Role
from tulip_memory.store import PgMemory
from tulip_producer import Producer, ProducerSettings
from tulip_wire.events import encode, session_ended
from tulip_workers.extraction import APPLIED, ExtractionWorker
from tulip_workers.extractors import heuristic

DB = 15  # a Redis database of this module's own
TABLE = f"checks_{uuid.uuid4().hex[:8]}"
SAID = [Message(role=Role.USER, content="My favourite colour is green. I work as a nurse.")]

#: Measured on this tree; the target of each is 1.
PRODUCER_NAMESPACE_CHECKS = 4
PRODUCER_JSON_PARSES = 0
WORKER_NAMESPACE_CHECKS = 12
WORKER_JSON_PARSES = 1


@pytest.fixture
def producer(redis_url: str, tmp_path: Path) -> Iterator[Producer]:
    settings = ProducerSettings(
        broker_url=with_db(redis_url, DB), spool_dir=tmp_path / "spool", extract_shards=1
    )
    made = Producer(settings)
    yield made
    made.close(timeout=2)


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PgMemory]:
    s = app_store(pg_dsn, table=TABLE, embedder=HashingEmbedder(384))
    yield s
    await s.close()


def report(side: str, checks: Checks) -> None:
    print(f"{side}: validate_namespace {checks.namespace_checks} {dict(checks.namespace)}")
    print(f"{side}: json.loads {checks.json_parses} {dict(checks.json)}")


def test_the_producer_checks_a_sessions_namespace_at_most_as_often_as_measured(
    producer: Producer, tenant: str
) -> None:
    ns = (tenant, "users", "u1")
    producer.session_ended((tenant, "users", "warm-up"), "t0", SAID)
    with counting() as checks:
        event_id = producer.session_ended(ns, "thread-1", SAID)
    report("producer", checks)
    delivered = take_all(producer.settings)
    assert event_id in {d.task_id for d in delivered}
    assert 1 <= checks.namespace_checks <= PRODUCER_NAMESPACE_CHECKS
    assert checks.json_parses <= PRODUCER_JSON_PARSES


async def test_the_worker_checks_and_parses_a_delivered_event_at_most_as_often_as_measured(
    store: PgMemory, tenant: str
) -> None:
    worker = ExtractionWorker(store=store, extractor=heuristic)
    warm_up = session_ended((tenant, "users", "warm-up"), "t0", SAID, ts=time.time()).with_seq(1)
    assert await worker.handle(encode(warm_up), warm_up.id) == APPLIED
    env = session_ended((tenant, "users", "u1"), "thread-1", SAID, ts=time.time()).with_seq(1)
    body = encode(env)
    with counting() as checks:
        assert await worker.handle(body, env.id) == APPLIED
    report("worker", checks)
    assert 1 <= checks.namespace_checks <= WORKER_NAMESPACE_CHECKS
    assert 1 <= checks.json_parses <= WORKER_JSON_PARSES

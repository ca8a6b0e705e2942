"""What a caller tracks a publish by: an idempotency key that makes a republished session
the same event, the event id a checkpoint save carries, and ``Reader.wait``."""

from __future__ import annotations

import pickle
import uuid

import pytest

from tests.producer.conftest import MakeProducer
from tests.producer.queues import take_all
from tests.support.pg import app_store
from tulip_memory.state import AgentState
from tulip_producer import ProducerSettings
from tulip_producer.producer import SavedCheckpoint
from tulip_producer.reader import AsyncReader
from tulip_wire.published import published_events

SESSION = [{"role": "user", "content": "I moved to Porto."}]


def test_the_same_idempotency_key_is_the_same_event(
    broker_url: str, make_producer: MakeProducer
) -> None:
    producer = make_producer(broker_url)
    user = ("acme", "users", f"u-{uuid.uuid4().hex[:8]}")
    first = producer.session_ended(user, "t", SESSION, idempotency_key="s-1")
    again = producer.session_ended(user, "t", SESSION, idempotency_key="s-1")
    assert first == again and len(first) == 32
    others = {
        producer.session_ended(user, "t", SESSION, idempotency_key="s-2"),
        producer.session_ended(user, "t2", SESSION, idempotency_key="s-1"),
        producer.session_ended(("globex", *user[1:]), "t", SESSION, idempotency_key="s-1"),
        producer.session_ended(user, "t", SESSION),
    }
    assert first not in others and len(others) == 4
    settings = ProducerSettings(broker_url=broker_url, extract_shards=4)
    sent = take_all(settings, lambda env: env.id == first)
    assert [d.envelope.id for d in sent] == [first, first]  # the ledger applies it once


def test_a_checkpoint_save_returns_its_checkpoint_id_carrying_its_event_id(
    broker_url: str, make_producer: MakeProducer
) -> None:
    producer = make_producer(broker_url, checkpoint_shards=2)
    saved = producer.checkpoint_saved("thread-1", AgentState(), tenant="acme")
    assert isinstance(saved, SavedCheckpoint) and isinstance(saved, str)
    assert saved.checkpoint_id == str(saved) and len(saved) == 32
    assert len(saved.event_id) == 32 and saved.event_id != saved
    assert pickle.loads(pickle.dumps(saved)).event_id == saved.event_id
    assert repr(saved) == f"SavedCheckpoint({str(saved)!r}, event_id={saved.event_id!r})"


async def test_wait_answers_unknown_at_once_and_names_an_event_still_pending(
    broker_url: str, make_producer: MakeProducer, pg_dsn: str
) -> None:
    producer = make_producer(broker_url)
    event_id = producer.session_ended(("acme", "users", "w"), "t", SESSION)  # no worker runs
    reader = AsyncReader(app_store(pg_dsn), published=published_events(broker_url))
    try:
        assert (await reader.wait(uuid.uuid4().hex, tenant="acme")).state == "unknown"
        assert (await reader.wait(event_id, tenant="globex")).state == "unknown"
        with pytest.raises(TimeoutError, match=f"event {event_id} of tenant 'acme' still pending"):
            await reader.wait(event_id, tenant="acme", timeout=0.3, interval=0.05)
    finally:
        await reader.close()

"""Erase events at the door: what the producer publishes (queue, task, order with the
subject's events, the tenant marker, signing), and what the envelope refuses."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from tests.producer.conftest import SHARDS, MakeProducer
from tests.producer.queues import by_key, rising, take_all
from tulip_producer import AsyncProducer, ProducerSettings
from tulip_wire import forget
from tulip_wire.events import (
    MEMORY_FORGET,
    Envelope,
    EventError,
    decode,
    encode,
    memory_forget,
    namespace_key,
    thread_forget,
)
from tulip_wire.routing import ShardRouter
from tulip_wire.signing import signer_of
from tulip_wire.topology import EXTRACT_TASK, forgetting_key

NS = ("acme", "users", "u1")


def test_an_erase_is_ordered_with_its_namespaces_sessions_on_their_shard(
    broker_url: str, make_producer: MakeProducer
) -> None:
    producer = make_producer(broker_url)
    before = producer.session_ended(NS, "t", [{"role": "user", "content": "hi"}])
    erase = producer.forget(NS)
    messages = producer.forget_messages(NS, ["m1", "m2"])
    after = producer.session_ended(NS, "t", [{"role": "user", "content": "again"}])
    got = take_all(ProducerSettings(broker_url=broker_url, extract_shards=SHARDS))
    mine = by_key(got)[namespace_key(NS)]
    assert [e.id for e in mine] == [before, erase, messages, after]
    assert rising([e.seq for e in mine])
    queue = ShardRouter("memory.extract", SHARDS).queue(namespace_key(NS))
    erases = [d for d in got if d.envelope.type == MEMORY_FORGET]
    assert {(d.queue, d.task) for d in erases} == {(queue, EXTRACT_TASK)}
    assert erases[1].envelope.payload == {
        "tenant": "acme", "scope": "messages", "namespace": list(NS), "message_ids": ["m1", "m2"],
    }  # fmt: skip


def test_a_tenant_erase_marks_its_tenant_before_it_is_published(
    broker_url: str, make_producer: MakeProducer
) -> None:
    producer = make_producer(broker_url)
    erase = producer.forget_tenant("acme")
    client = redis.Redis.from_url(broker_url)
    try:
        marker = forget.parse_marker(client.get(forgetting_key("acme")))
    finally:
        client.close()
    assert marker is not None and marker[0] == erase
    assert abs(marker[1] - time.time()) < 60
    (got,) = [d.envelope for d in take_all(ProducerSettings(broker_url=broker_url,
                                                             extract_shards=SHARDS))
              if d.envelope.id == erase]  # fmt: skip
    assert got.key == "acme" and got.payload == {"tenant": "acme", "scope": "tenant"}
    assert got.ts == marker[1]


def test_the_async_twins_publish_the_same_events(broker_url: str, tmp_path: object) -> None:
    async def go() -> list[str]:
        settings = ProducerSettings(
            broker_url=broker_url,
            extract_shards=SHARDS,
            spool_dir=tmp_path / "s",  # type: ignore[operator]
        )
        async with AsyncProducer(settings) as producer:
            return [
                await producer.forget(NS),
                await producer.forget_messages(NS, ["m1"]),
                await producer.forget_thread("t-1", tenant="acme"),
                await producer.forget_tenant("acme"),
            ]

    ids = asyncio.run(go())
    assert len(set(ids)) == 4
    settings = ProducerSettings(broker_url=broker_url, extract_shards=SHARDS)
    got = {d.envelope.id: d for d in take_all(settings)}
    assert set(ids) <= set(got)
    assert got[ids[2]].queue.startswith("memory.checkpoint.")  # the thread's shard
    assert got[ids[2]].task == "tulip.memory.checkpoint"


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({"tenant": "acme", "scope": "everything"}, "payload.scope"),
        ({"tenant": "acme", "scope": "tenant", "namespace": ["acme"]}, "tenant only"),
        ({"tenant": "acme", "scope": "namespace", "namespace": ["other", "u"]}, "start with"),
        ({"tenant": "acme", "scope": "messages", "namespace": ["acme"], "message_ids": []},
         "message_ids"),
        ({"tenant": "acme", "scope": "messages", "namespace": ["acme"], "message_ids": [7]},
         "message_ids"),
        ({"tenant": "", "scope": "tenant"}, "payload.tenant"),
    ],
)  # fmt: skip
def test_a_malformed_erase_payload_is_refused(payload: dict[str, object], problem: str) -> None:
    env = Envelope(type=MEMORY_FORGET, key="acme", payload=payload, seq=1, ts=1.0)
    with pytest.raises(EventError, match=problem):
        decode(encode(env))


def test_an_erase_whose_key_is_not_its_subject_is_refused() -> None:
    env = memory_forget("namespace", "acme", NS, ts=1.0)
    forged = Envelope(type=MEMORY_FORGET, key="acme", payload=env.payload, seq=1, ts=1.0)
    with pytest.raises(EventError, match="subject"):
        decode(encode(forged))
    thread = thread_forget("acme", "t-1", ts=1.0)
    moved = Envelope(type=thread.type, key="other\x1ft-1", payload=thread.payload, seq=1, ts=1.0)
    with pytest.raises(EventError, match="thread_id"):
        decode(encode(moved))


def test_the_producer_refuses_a_bad_subject_before_publishing(
    broker_url: str, make_producer: MakeProducer
) -> None:
    producer = make_producer(broker_url)
    with pytest.raises((TypeError, ValueError)):
        producer.forget("acme")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        producer.forget_messages(NS, "m1")
    with pytest.raises(ValueError):
        producer.forget_tenant("a\x1fb")
    assert take_all(ProducerSettings(broker_url=broker_url, extract_shards=SHARDS)) == []


def test_a_signing_producer_signs_its_erases(broker_url: str, make_producer: MakeProducer) -> None:
    key = "k" * 32
    producer = make_producer(broker_url, signing_key=key)
    erase = producer.forget(NS)
    (got,) = [d for d in take_all(ProducerSettings(broker_url=broker_url, extract_shards=SHARDS))
              if d.envelope.id == erase]  # fmt: skip
    signer = signer_of(key)
    assert signer is not None
    signer.verify(decode(got.args[0]))

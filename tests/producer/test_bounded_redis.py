"""Redis holds state for the keys in use: every per-key counter expires when its key
is idle, and a key's numbers keep rising across the expiry (the workers' sequence
fence compares them); key names stay short whatever the namespace."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from tests.producer.conftest import MakeProducer
from tests.producer.queues import take_all
from tulip_memory.messages import Message, Role
from tulip_wire.events import namespace_key, thread_key
from tulip_wire.pending import PendingStates
from tulip_wire.topology import MAX_NAMED_KEY_BYTES, pending_key, redis_name, seq_key

SAID = [Message(role=Role.USER, content="hello")]


def _gone(client: redis.Redis, key: str, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while client.exists(key):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "general"])
def test_a_counter_that_expired_between_two_events_starts_above_the_first(
    broker_url: str, make_producer: MakeProducer, direct: bool
) -> None:
    producer = make_producer(broker_url, seq_idle_ttl=0.3, direct_publish=direct)
    client = redis.Redis.from_url(broker_url)
    ns = (f"t-{uuid.uuid4().hex[:8]}", "user")
    producer.session_ended(ns, "t", SAID)
    key = seq_key(namespace_key(ns))
    assert 0 < client.pttl(key) <= 300  # kept only while the key is in use
    assert _gone(client, key)  # idle: Redis forgets the counter
    producer.session_ended(ns, "t", SAID)
    first, second = take_all(producer.settings)
    assert (first.envelope.seq or 0) < (second.envelope.seq or 0)


def test_a_counter_written_by_an_older_release_is_continued_upwards(
    broker_url: str, make_producer: MakeProducer
) -> None:
    producer = make_producer(broker_url)
    client = redis.Redis.from_url(broker_url)
    ns = (f"t-{uuid.uuid4().hex[:8]}", "user")
    client.set(seq_key(namespace_key(ns)), 41)  # a plain INCR counter, no TTL
    producer.session_ended(ns, "t", SAID)
    (got,) = take_all(producer.settings)
    assert (got.envelope.seq or 0) > 41 and client.pttl(seq_key(namespace_key(ns))) > 0


def test_long_keys_are_named_by_their_digest_and_every_per_key_key_expires(
    broker_url: str, make_producer: MakeProducer
) -> None:
    producer = make_producer(broker_url)
    client = redis.Redis.from_url(broker_url)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    long_ns = (tenant, "x" * 2000)
    long_thread = "thread-" + "y" * 400
    producer.session_ended(long_ns, "t", SAID)
    producer.checkpoint_saved(long_thread, {"messages": [{"role": "user", "content": "hi"}]},
                              tenant=tenant)  # fmt: skip
    names = [seq_key(namespace_key(long_ns)), seq_key(thread_key(tenant, long_thread))]
    names.append(pending_key(thread_key(tenant, long_thread)))
    for name in names:
        assert len(name.encode()) < 32 + MAX_NAMED_KEY_BYTES
        assert client.pttl(name) > 0
    assert PendingStates(client).entries(tenant, long_thread)  # still found by its reader
    assert redis_name(namespace_key((tenant, "short"))) == namespace_key((tenant, "short"))
    take_all(producer.settings)

"""Producers route by the shard layout record in Redis: a count there wins over their
setting, and while a reshard drains, new events wait in the spool (nothing published
to either layout) until the switch delivers them by the new count."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.producer.conftest import SHARDS, MakeProducer
from tulip_memory.messages import Message, Role
from tulip_wire.events import namespace_key
from tulip_wire.routing import ShardRouter
from tulip_wire.shardlayout import Resharding, ShardLayout, layout_key
from tulip_wire.topology import EXTRACT_QUEUE_PREFIX

KEY = layout_key(EXTRACT_QUEUE_PREFIX)
NS = ("acme", "users", "moves")  # a namespace whose shard differs under 4 and 6 shards
SAID = [Message(role=Role.USER, content="my favourite colour is teal")]


def test_records() -> None:
    assert ShardLayout.parse(None) is None
    assert ShardLayout.parse(b"6") == ShardLayout(6)
    assert ShardLayout.parse("drain 4 6") == ShardLayout(6, 4)
    assert ShardLayout(6, 4).encode() == "drain 4 6" and ShardLayout(6).encode() == "6"
    assert ShardLayout(6).route(EXTRACT_QUEUE_PREFIX) == 6
    with pytest.raises(Resharding, match="from 4 to 6"):
        ShardLayout(6, 4).route(EXTRACT_QUEUE_PREFIX)
    for bad in ("0", "six", "drain 4", "drain 4 0", "4 6", ""):
        with pytest.raises(ValueError, match="malformed shard layout"):
            ShardLayout.parse(bad)


@pytest.fixture
def client(broker_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(broker_url)
    queues = ShardRouter(EXTRACT_QUEUE_PREFIX, 6).queues()
    c.delete(KEY, *queues)
    yield c
    c.delete(KEY, *queues)
    c.close()


def depths(client: redis.Redis, shards: int) -> list[int]:
    return [int(client.llen(q)) for q in ShardRouter(EXTRACT_QUEUE_PREFIX, shards).queues()]


def test_the_record_routes_and_a_drain_holds_events_in_the_spool(
    broker_url: str, client: redis.Redis, make_producer: MakeProducer
) -> None:
    key = namespace_key(NS)
    old, new = ShardRouter(EXTRACT_QUEUE_PREFIX, SHARDS), ShardRouter(EXTRACT_QUEUE_PREFIX, 6)
    assert old.shard(key) != new.shard(key)
    producer = make_producer(broker_url)
    producer.session_ended(NS, "t", SAID)
    assert depths(client, 6)[old.shard(key)] == 1  # no record: the producer's own setting

    client.set(KEY, ShardLayout(6, SHARDS).encode())
    producer.session_ended(NS, "t", SAID)
    producer.session_ended(NS, "t", SAID)
    assert producer.spooled == 2 and sum(depths(client, 6)) == 1  # held, not published
    assert not producer.flush(timeout=0.5)  # the flusher keeps them while it drains

    client.set(KEY, ShardLayout(6).encode())
    assert producer.flush(timeout=10)
    assert depths(client, 6)[new.shard(key)] == 2 and sum(depths(client, 6)) == 3
    producer.session_ended(NS, "t", SAID)
    assert depths(client, 6)[new.shard(key)] == 3

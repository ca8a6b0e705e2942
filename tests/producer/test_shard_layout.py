"""Producers route by the shard layout record in Redis: a count there wins over their
setting, and while a reshard drains, new events wait in the spool (nothing published
to either layout) until the switch delivers them by the new count."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import boto3
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


@pytest.fixture
def versioned_claims(s3_endpoint: str) -> tuple[str, str]:
    """A claim-check URL on a versioned bucket (every put is a version), and its bucket."""
    bucket = f"claims-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    return f"s3://{bucket}/claims", bucket


def puts(s3_endpoint: str, bucket: str) -> int:
    s3 = boto3.client("s3", endpoint_url=s3_endpoint)
    return len(s3.list_object_versions(Bucket=bucket).get("Versions", []))


def test_a_claim_checked_payload_is_put_once_across_a_reshard(
    broker_url: str,
    client: redis.Redis,
    make_producer: MakeProducer,
    s3_endpoint: str,
    versioned_claims: tuple[str, str],
) -> None:
    """Another count in the record (the direct attempt steps aside for the general
    path), then a drain (the spool retries the event until the switch): one put each."""
    url, bucket = versioned_claims
    producer = make_producer(
        broker_url, max_event_bytes=4096, claim_check_url=url, s3_endpoint_url=s3_endpoint
    )
    big = [Message(role=Role.USER, content="teal " * 2000)]
    client.set(KEY, ShardLayout(6).encode())
    producer.session_ended(NS, "t", big)
    assert producer.spooled == 0 and puts(s3_endpoint, bucket) == 1

    client.set(KEY, ShardLayout(SHARDS, 6).encode())
    producer.session_ended(NS, "t", big)
    assert not producer.flush(timeout=1.0)  # attempts while it drains
    client.set(KEY, ShardLayout(SHARDS).encode())
    assert producer.flush(timeout=10)
    assert sum(depths(client, 6)) == 2 and puts(s3_endpoint, bucket) == 2

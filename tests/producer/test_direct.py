"""The one-round-trip publish writes the message Celery's ``send_task`` would (the same
task, id, args and sequence number, decodable by kombu), and steps aside for the
general path whenever it cannot be exact: another shard layout, signing."""

from __future__ import annotations

import base64
import json
from _collections_abc import dict_items
from dataclasses import replace
from typing import Any

import pytest
import redis

from tests.producer.conftest import SHARDS, MakeProducer
from tulip_memory.messages import Message, Role
from tulip_wire import events
from tulip_wire.events import decode, namespace_key
from tulip_wire.routing import ShardRouter
from tulip_wire.shardlayout import ShardLayout, layout_key
from tulip_wire.topology import EXTRACT_QUEUE_PREFIX, EXTRACT_TASK, SEQ_KEY_PREFIX

NS = ("acme", "users", "direct")
# Text that looks like the sequence number's neighbourhood, quotes and all.
SAID = [Message(role=Role.USER, content='my "seq": 9007199254740993 and \\"seq\\": 1 ünïcode')]
QUEUE = ShardRouter(EXTRACT_QUEUE_PREFIX, SHARDS).queue(namespace_key(NS))


class Serializations(dict[str, Any]):
    """Metadata that counts how often ``json.dumps`` reads it (it asks for the items)."""

    serialized = 0

    def items(self) -> dict_items[str, Any]:
        self.serialized += 1
        return super().items()


@pytest.fixture
def client(broker_url: str) -> redis.Redis:
    c = redis.Redis.from_url(broker_url)
    c.delete(layout_key(EXTRACT_QUEUE_PREFIX), QUEUE, SEQ_KEY_PREFIX + namespace_key(NS))
    return c


def stored(client: redis.Redis) -> tuple[dict[str, Any], list[Any]]:
    """The newest message on the queue, and its args as Celery decodes the body."""
    message = json.loads(client.lindex(QUEUE, 0))  # type: ignore[arg-type]
    body = message["body"]
    if message["properties"].get("body_encoding") == "base64":
        body = base64.b64decode(body).decode()
    return message, json.loads(body)


def test_direct_and_general_publish_store_the_same_task(
    broker_url: str, client: redis.Redis, make_producer: MakeProducer
) -> None:
    direct = make_producer(broker_url)
    general = make_producer(broker_url, direct_publish=False)
    first = direct.session_ended(NS, "t", SAID)
    one, (args_one, kwargs_one, _) = stored(client)
    second = general.session_ended(NS, "t", SAID)
    two, (args_two, kwargs_two, _) = stored(client)
    assert "body_encoding" not in one["properties"]  # the direct path wrote it
    assert two["properties"]["body_encoding"] == "base64"  # Celery's send_task did
    env_one, env_two = decode(args_one[0]), decode(args_two[0])
    assert (env_one.id, env_one.seq, env_two.id, env_two.seq) == (first, 1, second, 2)
    assert env_one.payload == env_two.payload  # the user's text untouched by the script
    assert kwargs_one == kwargs_two == {}
    for field in ("task", "lang", "retries", "timelimit", "kwargsrepr"):
        assert one["headers"][field] == two["headers"][field], field
    assert one["headers"]["task"] == EXTRACT_TASK and one["headers"]["id"] == first
    assert one["properties"]["delivery_info"] == two["properties"]["delivery_info"]
    assert client.get(f"tulip:published:{first}") is not None


def test_another_layout_or_a_signing_key_takes_the_general_path(
    broker_url: str, client: redis.Redis, make_producer: MakeProducer
) -> None:
    producer = make_producer(broker_url)
    client.set(layout_key(EXTRACT_QUEUE_PREFIX), ShardLayout(SHARDS + 1).encode())
    producer.session_ended(("acme", "users", "elsewhere"), "t", SAID)
    client.set(layout_key(EXTRACT_QUEUE_PREFIX), ShardLayout(SHARDS).encode())
    producer.session_ended(NS, "t", SAID)
    assert "body_encoding" not in stored(client)[0]["properties"]  # its own count again
    signed = make_producer(broker_url, signing_key="k" * 32)
    signed.session_ended(NS, "t", SAID)
    message, (args, _, _) = stored(client)
    assert message["properties"]["body_encoding"] == "base64"
    assert decode(args[0]).seq == 2
    client.delete(layout_key(EXTRACT_QUEUE_PREFIX))


def test_a_publish_serializes_the_event_once(
    broker_url: str, client: redis.Redis, make_producer: MakeProducer
) -> None:
    """The encoding that proves the event valid is the one that goes out."""
    producer = make_producer(broker_url)
    env = events.session_ended(NS, "t", SAID, ts=1.0)
    metadata = Serializations(source="import")
    payload = env.payload
    assert payload is not None
    env = replace(env, payload={**payload, "metadata": metadata})
    producer.publish_session(env)
    assert metadata.serialized == 1
    message, (args, _, _) = stored(client)
    assert "body_encoding" not in message["properties"]  # the direct path took it
    published = decode(args[0])
    assert (published.id, published.seq) == (env.id, 1)
    assert published.payload == {**payload, "metadata": {"source": "import"}}

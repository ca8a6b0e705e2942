"""The one-round-trip publish writes the message Celery's ``send_task`` would (every
field but the event's own, decodable by kombu), and steps aside for the general path
whenever it cannot be exact: another shard layout, signing, a message Celery builds in
a way the template cannot follow."""

from __future__ import annotations

import base64
import json
import logging
import uuid
from _collections_abc import dict_items
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from celery.signals import before_task_publish

from tests.producer.conftest import SHARDS, MakeProducer
from tests.producer.queues import rising
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_ops.dev.embedded import EmbeddedRedis
from tulip_producer import ProducerSettings
from tulip_producer.direct import RAW_ENVELOPE_MAX, DirectPublisher, who
from tulip_producer.producer import celery_app
from tulip_wire import events
from tulip_wire.celeryconfig import kombu_queue
from tulip_wire.events import decode, namespace_key, thread_key
from tulip_wire.pending import PendingStates
from tulip_wire.routing import ShardRouter
from tulip_wire.shardlayout import ShardLayout, layout_key
from tulip_wire.topology import (
    CHECKPOINT_QUEUE_PREFIX,
    EXTRACT_QUEUE_PREFIX,
    EXTRACT_TASK,
    SEQ_KEY_PREFIX,
)

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


def but_the_events_own(message: dict[str, Any], event_id: str, seq: int) -> dict[str, Any]:
    """``message`` without what is its event's own: the body (and its encoding), the
    delivery tag, the id, the number, and the sending thread's ``reply_to``."""
    properties = {
        k: v
        for k, v in message["properties"].items()
        if k not in {"body_encoding", "delivery_tag", "reply_to"}
    }
    text = json.dumps({**message, "body": None, "properties": properties})
    return dict(json.loads(text.replace(event_id, "<id>").replace(f"seq={seq}>", "seq=<n>>")))


def test_the_direct_message_is_send_tasks_but_for_the_events_own_fields(
    broker_url: str, client: redis.Redis, make_producer: MakeProducer
) -> None:
    direct = make_producer(broker_url)
    general = make_producer(broker_url, direct_publish=False)
    first = direct.session_ended(NS, "t", SAID)
    one, (args_one, kwargs_one, embed_one) = stored(client)
    second = general.session_ended(NS, "t", SAID)
    two, (args_two, kwargs_two, embed_two) = stored(client)
    assert one["properties"]["body_encoding"] is None  # the direct path wrote it
    assert two["properties"]["body_encoding"] == "base64"  # Celery's send_task did
    env_one, env_two = decode(args_one[0]), decode(args_two[0])
    one_seq, two_seq = env_one.seq or 0, env_two.seq or 0
    assert but_the_events_own(one, first, one_seq) == but_the_events_own(two, second, two_seq)
    assert (kwargs_one, embed_one) == (kwargs_two, embed_two) and kwargs_one == {}
    assert (env_one.id, env_two.id) == (first, second) and rising([one_seq, two_seq])
    assert env_one.payload == env_two.payload  # the user's text untouched by the script
    assert one["headers"]["task"] == EXTRACT_TASK and one["headers"]["id"] == first
    # Flower shows the tenant and a short key, never the namespace's names or the text.
    short = who(namespace_key(NS))
    assert short.startswith(f"{NS[0]}:") and len(short) == len(NS[0]) + 9
    assert one["headers"]["argsrepr"] == f"[<session.ended {short} {first} seq={one_seq}>]"
    assert two["headers"]["argsrepr"] == f"[<session.ended {short} {second} seq={two_seq}>]"
    assert one["properties"]["delivery_tag"] != two["properties"]["delivery_tag"]
    assert client.get(f"tulip:published:{first}") == namespace_key(NS).encode()


def test_another_layout_or_a_signing_key_takes_the_general_path(
    broker_url: str, client: redis.Redis, make_producer: MakeProducer
) -> None:
    producer = make_producer(broker_url)
    client.set(layout_key(EXTRACT_QUEUE_PREFIX), ShardLayout(SHARDS + 1).encode())
    producer.session_ended(("acme", "users", "elsewhere"), "t", SAID)
    client.set(layout_key(EXTRACT_QUEUE_PREFIX), ShardLayout(SHARDS).encode())
    producer.session_ended(NS, "t", SAID)
    assert stored(client)[0]["properties"]["body_encoding"] is None  # its own count again
    signed = make_producer(broker_url, signing_key="k" * 32)
    signed.session_ended(NS, "t", SAID)
    message, (args, _, _) = stored(client)
    assert message["properties"]["body_encoding"] == "base64"
    assert (decode(args[0]).seq or 0) > 0
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
    assert message["properties"]["body_encoding"] is None  # the direct path took it
    published = decode(args[0])
    assert published.id == env.id and (published.seq or 0) > 0
    assert published.payload == {**payload, "metadata": {"source": "import"}}


def gzip(app: Celery) -> Iterator[None]:
    app.conf.task_compression = "gzip"
    yield


def a_header_per_publish(app: Celery) -> Iterator[None]:
    """A publish hook adding a header of its own to every message (a tracer's, say)."""

    def add(headers: dict[str, Any], **_: Any) -> None:
        headers["trace"] = uuid.uuid4().hex

    before_task_publish.connect(add, weak=False)
    try:
        yield
    finally:
        before_task_publish.disconnect(add)


@pytest.mark.parametrize("spoil", [gzip, a_header_per_publish])
def test_a_message_the_template_cannot_follow_leaves_it_to_send_task(
    broker_url: str, caplog: pytest.LogCaptureFixture, spoil: Callable[[Celery], Iterator[None]]
) -> None:
    settings = ProducerSettings(broker_url=broker_url)
    client = redis.Redis.from_url(broker_url)

    def queue(name: str) -> Any:
        return kombu_queue(name, ordered=True, amqp=False)

    assert DirectPublisher.create(client, settings, celery_app(settings), queue) is not None
    app = celery_app(settings)
    with caplog.at_level(logging.WARNING, "tulip_producer.direct"):
        for _ in spoil(app):
            assert DirectPublisher.create(client, settings, app, queue) is None
    assert "cannot be templated" in caplog.text


def test_a_checkpoint_save_and_its_pending_entry_go_in_the_one_script(
    broker_url: str, client: redis.Redis, make_producer: MakeProducer
) -> None:
    """A save is numbered, enqueued and appended to its thread's pending list by one
    script; under another layout the general path does it all instead, and the entry
    is appended once either way, in the order of the numbers."""
    two = three = ""
    while two == three:  # a thread whose queue the layout of 3 shards changes
        thread = f"direct-{uuid.uuid4().hex}"
        key = thread_key("acme", thread)
        two, three = (ShardRouter(CHECKPOINT_QUEUE_PREFIX, n).queue(key) for n in (2, 3))
    client.delete(two, three, layout_key(CHECKPOINT_QUEUE_PREFIX))
    producer = make_producer(broker_url, checkpoint_shards=2)
    odd = Message(role=Role.USER, content='a\nline\t\x01\x7f 🌷 \\" é "')  # escaped by the script
    states = [AgentState(messages=SAID), AgentState(messages=[*SAID, odd], iterations=2)]
    ids = [producer.checkpoint_saved(thread, s, tenant="acme") for s in states]
    client.set(layout_key(CHECKPOINT_QUEUE_PREFIX), ShardLayout(3).encode())
    ids.append(producer.checkpoint_saved(thread, states[1], tenant="acme"))
    client.delete(layout_key(CHECKPOINT_QUEUE_PREFIX))
    direct = [json.loads(m) for m in reversed(client.lrange(two, 0, -1))]
    general = [json.loads(m) for m in client.lrange(three, 0, -1)]
    assert [m["properties"]["body_encoding"] for m in direct] == [None, None]
    assert [m["properties"]["body_encoding"] for m in general] == ["base64"]
    sent = [decode(json.loads(m["body"])[0][0]) for m in direct]
    sent.append(decode(json.loads(base64.b64decode(general[0]["body"]))[0][0]))
    assert [(e.payload or {})["checkpoint_id"] for e in sent] == ids
    assert rising([e.seq for e in sent])
    assert "state" in (sent[0].payload or {}) and "delta" in (sent[1].payload or {})
    entries = PendingStates(client).entries("acme", thread)
    assert [e.checkpoint_id for e in entries] == ids
    patch = (sent[1].payload or {})["delta"]["patch"]  # sent once, in the pending entry
    assert patch == json.loads(entries[1].body)
    assert json.dumps(odd.content) in json.dumps(patch)
    assert client.pttl(PendingStates.key("acme", thread)) > 0
    client.delete(two, three)


def test_every_producer_runs_the_same_scripts(broker_url: str, make_producer: MakeProducer) -> None:
    """What is a process's own (Celery's origin and reply_to) is sent per publish, not
    written into the script Redis keeps loaded: producers (of one version) share them."""
    one, two = make_producer(broker_url), make_producer(broker_url, checkpoint_shards=3)
    scripts = [p._publisher._direct._scripts for p in (one, two)]  # type: ignore[union-attr]
    assert {t: s.sha for t, s in scripts[0].items()} == {t: s.sha for t, s in scripts[1].items()}
    origins = [p._publisher._direct._templates[EXTRACT_TASK].process for p in (one, two)]  # type: ignore[union-attr]
    assert all(o.get("origin") for o in origins)


def net_in(client: redis.Redis) -> int:
    return int(client.info("stats")["total_net_input_bytes"])


def test_a_small_envelope_is_sent_as_it_is_and_escaped_by_the_script(
    tmp_path: Path, make_producer: MakeProducer
) -> None:
    """A quote in a thread's id costs a delta save's publish its JSON escape (one byte
    more) at each of the envelope's two mentions of the thread, not the seven more of
    an escape escaped again for the message; the message is the same. The thread id
    itself is sent in the two keys and the envelope only. A whole state
    over ``RAW_ENVELOPE_MAX`` is escaped by the producer, and decodes the same too."""
    server = EmbeddedRedis(tmp_path / "redis").start()
    client = redis.Redis.from_url(server.url)
    try:
        producer = make_producer(server.url, checkpoint_shards=1)
        queue = ShardRouter(CHECKPOINT_QUEUE_PREFIX, 1).queues()[0]
        big = Message(role=Role.USER, content='q" \\ ü 🌷 \x01 ' * (RAW_ENVELOPE_MAX // 8))
        states = [AgentState(messages=[big]), AgentState(messages=[big, *SAID], iterations=2)]

        def delta_bytes(thread: str) -> int:
            producer.checkpoint_saved(thread, states[0], tenant="acme")
            before = net_in(client)
            producer.checkpoint_saved(thread, states[1], tenant="acme")
            return net_in(client) - before

        plain, quoted = delta_bytes("t" + "a" * 100), delta_bytes("t" + '"' * 100)
        assert quoted - plain <= 2 * 100 + 8  # a few digits of lengths may differ
        longer = delta_bytes("t" + "a" * 200)  # in two keys and twice in the envelope
        assert longer - plain <= 4 * 100 + 8  # (the marker's value is the script's)
        odd = 'a "thread" \\ ü 🌷 \x01'
        delta_bytes(odd)
        messages = [json.loads(m) for m in reversed(client.lrange(queue, 0, -1))]
        sent = [decode(json.loads(m["body"])[0][0]) for m in messages[-2:]]
        assert [e.key for e in sent] == [thread_key("acme", odd)] * 2
        assert [(e.payload or {})["thread_id"] for e in sent] == [odd, odd]
        assert AgentState.from_checkpoint((sent[0].payload or {})["state"]) == states[0]
        assert "delta" in (sent[1].payload or {})
        loaded = PendingStates(client).entries("acme", odd)
        ids = [(e.payload or {})["checkpoint_id"] for e in sent]
        assert [e.checkpoint_id for e in loaded] == ids
    finally:
        client.close()
        server.stop()


def test_a_session_envelope_is_escaped_by_the_producer(
    tmp_path: Path, make_producer: MakeProducer
) -> None:
    """Only checkpoint saves are escaped by the script: a ``session.ended`` event's
    quotes reach Redis escaped for the message already (seven more bytes each), so
    the script spends no time escaping its text; the message is the same."""
    server = EmbeddedRedis(tmp_path / "redis").start()
    client = redis.Redis.from_url(server.url)
    try:
        producer = make_producer(server.url)

        def sent(content: str) -> int:
            before = net_in(client)
            producer.session_ended(NS, "t1", [Message(role=Role.USER, content=content)])
            return net_in(client) - before

        sent("warm-up")
        plain, quoted = sent("a" * 100), sent('"' * 100)
        assert quoted - plain >= 6 * 100
        body = json.loads(client.lindex(QUEUE, 0) or b"{}")["body"]
        assert (decode(json.loads(body)[0][0]).payload or {})["messages"][0]["content"] == (
            '"' * 100
        )
    finally:
        client.close()
        server.stop()


def test_delivery_tags_are_short_and_distinct(
    broker_url: str, client: redis.Redis, make_producer: MakeProducer
) -> None:
    """A tag crosses the wire with the publish, the worker's unacked write and its ack:
    16 random characters (96 bits), one per message."""
    producer = make_producer(broker_url)
    for _ in range(50):
        producer.session_ended(NS, "t", SAID)
    tags = [json.loads(m)["properties"]["delivery_tag"] for m in client.lrange(QUEUE, 0, -1)]
    assert len(tags) >= 50 and len(set(tags)) == len(tags)
    assert {len(t) for t in tags} == {16}


def test_flower_shows_a_tenant_s_characters_safely_and_no_name_of_the_key() -> None:
    assert who("acme\x1fusers\x1fmaya") == who("acme\x1fusers\x1fmaya")
    assert who("acme\x1fusers\x1fmaya") != who("acme\x1fusers\x1fbob")
    shown = who('a"b\\c d\x1fsecret-name')
    assert shown.startswith("a_b_c_d:") and "secret" not in shown
    assert len(who("t" * 200 + "\x1fx").split(":")[0]) == 40

"""Publishing to a live broker: shard queues, Celery task messages, order, claim-check."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis

from tests.producer.conftest import SHARDS, MakeProducer
from tests.producer.queues import by_key, rising, take_all
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_producer import AsyncProducer, ClaimCheckStore, ProducerSettings
from tulip_producer.producer import (
    PublishError,
    extract_queues,
)
from tulip_producer.spool import Spool
from tulip_wire.endpoints import kombu_url
from tulip_wire.events import TASKS, Envelope, EventError, encode, namespace_key, session_ended
from tulip_wire.routing import ShardRouter
from tulip_wire.topology import EXTRACT_QUEUE_PREFIX, SEQ_KEY_PREFIX

ROUTER = ShardRouter(EXTRACT_QUEUE_PREFIX, SHARDS)
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"


def chat(text: str = "hello") -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": text},
        Message(role=Role.ASSISTANT, content=f"re: {text}").to_dict(),
    ]


def metadata(env: Envelope) -> dict[str, Any]:
    assert env.payload is not None
    return dict(env.payload["metadata"])


def test_events_land_on_their_shard_queue_as_celery_tasks(
    broker_url: str, make_producer: MakeProducer, tenant: str
) -> None:
    producer = make_producer(broker_url)
    namespaces = [(tenant, f"user-{i}") for i in range(6)]
    sent = {
        producer.session_ended(ns, f"thread-{i}", chat(f"m{i}"), {"i": i}): ns
        for i, ns in enumerate(namespaces)
    }
    delivered = take_all(producer.settings)
    assert {d.task_id for d in delivered} == set(sent)
    assert len({d.queue for d in delivered}) > 1  # the namespaces spread over shards
    for d in delivered:
        ns = sent[d.task_id]
        env = d.envelope
        assert d.queue == ROUTER.queue(namespace_key(ns))
        assert d.task == TASKS["session.ended"] == "tulip.memory.extract"
        assert len(d.args) == 1 and json.loads(d.args[0])["id"] == d.task_id == env.id
        assert env.type == "session.ended" and env.key == namespace_key(ns) and (env.seq or 0) > 0
        assert env.payload is not None and env.payload_ref is None
        i = env.payload["metadata"]["i"]
        assert env.payload["namespace"] == list(ns) and env.payload["thread_id"] == f"thread-{i}"
        assert env.payload["messages"][0] == {**chat(f"m{i}")[0], **env.payload["messages"][0]}
        assert env.payload["messages"][1] == chat(f"m{i}")[1]
    assert producer.spooled == 0


def test_seq_strictly_increases_per_key_in_queue_order_with_8_threads(
    broker_url: str, make_producer: MakeProducer, tenant: str
) -> None:
    producer = make_producer(broker_url)
    keys = [(tenant, f"user-{k}") for k in range(10)]
    start = threading.Barrier(8)

    def publish(t: int) -> None:
        start.wait()
        for n in range(100):
            producer.session_ended(keys[(t + n) % 10], "thread", chat(), {"t": t, "n": n})

    threads = [threading.Thread(target=publish, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    delivered = take_all(producer.settings)
    assert len(delivered) == 800 and len({d.task_id for d in delivered}) == 800
    per_key = by_key(delivered)
    assert set(per_key) == {namespace_key(k) for k in keys}
    for key, envs in per_key.items():
        assert rising([e.seq for e in envs])  # no reorder
        assert {d.queue for d in delivered if d.envelope.key == key} == {ROUTER.queue(key)}
        for t in range(8):  # each thread's events of a key arrive in its call order
            calls = [metadata(e)["n"] for e in envs if metadata(e)["t"] == t]
            assert calls == sorted(calls)


@pytest.mark.parametrize(
    ("namespace", "thread_id", "messages", "metadata", "error", "match"),
    [
        ((), "t", [], None, ValueError, "at least one part"),
        (("ok", 7), "t", [], None, TypeError, r"namespace\[1\] must be a str"),
        ("tenant", "t", [], None, TypeError, "namespace must be a tuple of strings"),
        (("a\x1fb",), "t", [], None, ValueError, "namespace separator"),
        (("ok",), "", [], None, EventError, r"thread_id must be a string of 1\.\.512"),
        (("ok",), "t" * 513, [], None, EventError, r"thread_id must be a string of 1\.\.512"),
        (("ok",), "t\x00", [], None, EventError, "thread_id contains a NUL"),
        (("ok",), "t", "hello", None, TypeError, "messages must be a list of messages, got str"),
        (("ok",), "t", ["hello"], None, TypeError, r"messages\[0\] must be a Message or a dict"),
        (
            ("ok",),
            "t",
            [{"content": "no role"}],
            None,
            EventError,
            r"messages\[0\] is not a message",
        ),
        (("ok",), "t", [{"role": "wizard"}], None, EventError, r"messages\[0\] is not a message"),
        # What a worker could not process is refused here, with its path (content=123
        # was published, then dead-lettered after every attempt of a worker).
        *[
            (("ok",), "t", [{"role": "user", bad: value}], None, EventError, match)
            for bad, value, match in [
                ("content", 123, r"messages\[0\]\.content must be a string, got int"),
                ("name", ["x"], r"messages\[0\]\.name must be a string, got list"),
                ("tool_call_id", 1.5, r"messages\[0\]\.tool_call_id must be a string"),
                ("metadata", [1], r"messages\[0\]\.metadata must be an object, got list"),
                ("tool_calls", "call", r"messages\[0\]\.tool_calls must be a list, got str"),
                ("tool_calls", [{"id": 1}], r"messages\[0\]\.tool_calls\[0\] must be an"),
                # Text no Postgres column holds: a worker's decode refuses it.
                ("content", "my card is 4111\x00", "holds a NUL character"),
                ("content", "half a pair \ud800", "lone UTF-16 surrogate"),
            ]
        ],
        (
            ("ok",),
            "t",
            [],
            {"when": object()},
            EventError,
            "metadata.when is a object, not",
        ),
        (("ok",), "t", [], {"score": float("nan")}, EventError, "metadata.score is nan"),
        (
            ("ok",),
            "t",
            [
                *[{"role": "user", "content": "hi"}] * 3,
                {
                    "role": "user",
                    "content": "x",
                    "metadata": {"when": datetime(2026, 1, 1, tzinfo=UTC)},
                },
            ],
            None,
            EventError,
            r"messages\[3\]\.metadata\.when is a datetime, not a JSON value \(times: an ISO",
        ),
    ],
)
def test_bad_input_raises_and_nothing_is_published_or_spooled(
    broker_url: str,
    make_producer: MakeProducer,
    namespace: Any,
    thread_id: str,
    messages: Any,
    metadata: Any,
    error: type[Exception],
    match: str,
) -> None:
    producer = make_producer(broker_url)
    with pytest.raises(error, match=match):
        producer.session_ended(namespace, thread_id, messages, metadata)
    assert producer.spooled == 0
    assert take_all(producer.settings) == []
    seq_keys = redis.Redis.from_url(broker_url).keys(f"{SEQ_KEY_PREFIX}ok*")
    assert seq_keys == []


def test_a_checkpoint_whose_new_message_no_worker_could_process_is_refused(
    broker_url: str, make_producer: MakeProducer
) -> None:
    """As a mapping, or as an AgentState whose Message was built with an int: refused
    at the save, naming the message, whether the save would go whole or as a delta."""
    producer = make_producer(broker_url)
    ok = AgentState(messages=(Message(role=Role.USER, content="hi"),))
    producer.checkpoint_saved("t", ok, tenant="acme")
    bad = Message(role=Role.USER, content=123)  # type: ignore[arg-type]
    with pytest.raises(EventError, match=r"state\.messages\[1\]\.content must be a string"):
        producer.checkpoint_saved("t", ok.with_messages([*ok.messages, bad]), tenant="acme")
    mapping = {"messages": [{"role": "user", "content": 123}]}
    with pytest.raises(EventError, match=r"messages\[0\]\.content must be a string, got int"):
        producer.checkpoint_saved("u", mapping, tenant="acme")
    assert producer.spooled == 0 and len(take_all(producer.settings)) == 1  # the good save


@pytest.fixture
def s3_claims(s3_endpoint: str) -> str:
    bucket = f"claims-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/claims"


@pytest.mark.parametrize("backend", ["file", "s3"])
def test_a_payload_over_the_limit_travels_by_claim_check(
    broker_url: str,
    make_producer: MakeProducer,
    tenant: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    if backend == "s3":
        url, endpoint = request.getfixturevalue("s3_claims"), request.getfixturevalue("s3_endpoint")
    else:
        url, endpoint = f"file://{tmp_path}/claims", None
    producer = make_producer(
        broker_url, max_event_bytes=4096, claim_check_url=url, s3_endpoint_url=endpoint
    )
    big = chat("ünïcode " * 2000)  # ~20 KB
    big_id = producer.session_ended((tenant, "u"), "t", big, {"size": "big"})
    small_id = producer.session_ended((tenant, "u"), "t", chat("short"))

    delivered = {d.task_id: d for d in take_all(producer.settings)}
    assert len(delivered[small_id].args[0].encode()) <= 4096
    assert delivered[small_id].envelope.payload is not None  # small events stay inline
    env = delivered[big_id].envelope
    assert env.payload is None and env.payload_ref is not None and (env.seq or 0) > 0
    assert len(delivered[big_id].args[0].encode()) <= 4096
    ref = env.payload_ref
    assert ref.url.startswith(url)
    data = ClaimCheckStore.from_url(url, endpoint_url=endpoint).get(ref, big_id)
    assert ref.size == len(data) > 20_000
    payload = json.loads(data)
    assert payload["messages"] == [{**big[0], **payload["messages"][0]}, big[1]]
    assert payload["metadata"] == {"size": "big"} and payload["namespace"] == [tenant, "u"]


async def test_async_producer_publishes_in_call_order_from_a_running_loop(
    broker_url: str, tmp_path: Path, tenant: str
) -> None:
    settings = ProducerSettings(
        broker_url=broker_url, spool_dir=tmp_path / "spool", extract_shards=SHARDS
    )
    async with AsyncProducer(settings) as producer:
        ids = await asyncio.gather(
            *(
                producer.session_ended((tenant, "u"), "t", chat(f"m{i}"), {"i": i})
                for i in range(40)
            )
        )
        assert await producer.flush(timeout=10)
        assert producer.spooled == 0
    delivered = take_all(settings)
    assert [d.task_id for d in delivered] == ids  # gathered calls keep their order per key
    assert rising([d.envelope.seq for d in delivered]) and len(delivered) == 40


async def test_async_producer_never_blocks_the_loop_on_a_silent_broker(
    tmp_path: Path, broker_url: str, tenant: str
) -> None:
    silent = socket.socket()  # accepts connections (backlog) but never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    port = silent.getsockname()[1]
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        producer = AsyncProducer.from_urls(
            f"redis://127.0.0.1:{port}/0",
            redis_url=broker_url,
            spool_dir=tmp_path / "spool",
            publish_timeout=0.5,
        )
        event_id = await producer.session_ended((tenant, "u"), "t", chat())
        assert ticks > 0  # the loop ran while the publish waited on the broker
        assert len(event_id) == 32 and producer.spooled == 1
        await producer.close(timeout=1)
    finally:
        ticker.cancel()
        silent.close()


def test_closed_producer_refuses_calls_and_closing_is_idempotent(
    broker_url: str, make_producer: MakeProducer, tenant: str
) -> None:
    from tulip_producer.producer import ProducerClosed

    producer = make_producer(broker_url)
    with producer:
        producer.session_ended((tenant,), "t", chat())
    producer.close()
    with pytest.raises(ProducerClosed):
        producer.session_ended((tenant,), "t", chat())
    with pytest.raises(ProducerClosed):
        producer.flush()
    assert producer.spooled == 0  # still answers after close
    assert len(take_all(producer.settings)) == 1


def rabbitmq_reachable() -> bool:
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=0.5).close()
    except OSError:
        return False
    return True


@pytest.mark.skipif(
    not rabbitmq_reachable(),
    reason="RabbitMQ is not reachable at 127.0.0.1:5672 (only the Redis broker is tested)",
)
def test_the_same_publish_works_on_rabbitmq(
    broker_url: str, make_producer: MakeProducer, tenant: str
) -> None:
    producer = make_producer(RABBITMQ_URL, redis_url=broker_url)  # sequence numbers in Redis
    keys = [(tenant, f"user-{k}") for k in range(3)]
    ids = [producer.session_ended(keys[i % 3], "t", chat(f"m{i}")) for i in range(12)]
    assert producer.spooled == 0

    def mine(env: Any) -> bool:
        return bool(env.key.startswith(tenant))

    delivered = take_all(producer.settings, mine)
    assert sorted(d.task_id for d in delivered) == sorted(ids)
    for d in delivered:
        assert d.queue == ROUTER.queue(d.envelope.key) and d.task == "tulip.memory.extract"
    for envs in by_key(delivered).values():
        assert len(envs) == 4 and rising([e.seq for e in envs])
    _delete_unused_empty_queues(producer.settings)


def _delete_unused_empty_queues(settings: ProducerSettings) -> None:
    """Leave the shared RabbitMQ as we found it, unless someone else uses the queues."""
    from kombu import Connection

    with Connection(kombu_url(settings.broker_url), connect_timeout=5) as conn:
        for queue in extract_queues(settings):
            channel = conn.channel()
            try:
                channel.queue_delete(queue.name, if_unused=True, if_empty=True)
            except Exception:  # in use or not empty: someone else's; leave it
                pass
            finally:
                channel.close()


def test_republish_sends_an_event_exactly_as_it_was(
    broker_url: str, make_producer: MakeProducer, tenant: str, tmp_path: Path
) -> None:
    producer = make_producer(broker_url)
    producer.session_ended((tenant, "u"), "t", chat("first"))
    producer.session_ended((tenant, "u"), "t", chat("second"))
    first, second = take_all(producer.settings)
    producer.republish(first.args[0])  # a dead-letter replay, after a newer event
    (again,) = take_all(producer.settings)
    assert again.args == first.args and again.task_id == first.task_id
    assert again.envelope.seq == first.envelope.seq  # its own seq, not a new one
    assert rising([first.envelope.seq, second.envelope.seq])
    assert again.queue == first.queue

    unsequenced = json.loads(first.args[0]) | {"seq": None}
    with pytest.raises(EventError, match="only a published event"):
        producer.republish(json.dumps(unsequenced))
    with pytest.raises(EventError, match="not valid JSON"):
        producer.republish("{")

    dead = make_producer(f"unix://{tmp_path}/no-broker.sock", spool_dir=tmp_path / "other")
    with pytest.raises(PublishError, match=first.task_id):
        dead.republish(first.args[0])
    assert dead.spooled == 0  # a failed replay is the caller's to keep, not the spool's


def test_a_spooled_row_that_no_longer_decodes_is_set_aside_not_blocking(
    broker_url: str, make_producer: MakeProducer, tmp_path: Path, tenant: str
) -> None:
    """A checkpoint spooled by a producer from before tenant-keyed threads (no
    payload.tenant) can never be delivered: it moves to the rejected rows, kept for
    an operator, and the events behind it go out."""
    spool = Spool(tmp_path / "spool")
    old = {"v": 1, "id": uuid.uuid4().hex, "type": "checkpoint.saved", "key": "ticket-1",
           "seq": None, "ts": 1.0, "payload": {"thread_id": "ticket-1",
           "checkpoint_id": uuid.uuid4().hex, "state": {"messages": []}}}  # fmt: skip
    spool.append(json.dumps(old))
    behind = session_ended((tenant, "u"), "t", chat("behind the old row"), ts=time.time())
    spool.append(encode(behind))
    spool.close()
    producer = make_producer(broker_url, spool_dir=tmp_path / "spool")
    assert producer.flush(timeout=30)
    assert [d.task_id for d in take_all(producer.settings)] == [behind.id]
    reopened = Spool(tmp_path / "spool")
    try:
        [(row, reason)] = reopened.rejected()
        assert json.loads(row.envelope) == old and "payload.tenant is missing" in reason
    finally:
        reopened.close()

"""A shard queue's message is never lost between the pop and the unacked write.

kombu's ``BRPOP`` takes a message off the queue when Redis replies; a consumer that dies
before it has read the reply and written the unacked hash loses it. Each test here
reproduces that death against a real Redis by asking for a message and dropping the
connection before reading the reply (what a SIGKILL does, as far as Redis can tell),
with kombu's own transport (the message is gone) and with ours (it comes back, in order).
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Queue
from kombu import transport as kombu_transports

from tests.support.redis_servers import sentinel_url
from tulip_wire import celeryconfig
from tulip_wire.endpoints import broker_endpoint
from tulip_workers import reliable_redis
from tulip_workers.redelivery import restore_unacked

__all__ = ["sentinel_url"]  # fixtures
QUEUE = "memory.checkpoint.0"
exchange = Exchange("memory", type="direct")


@contextmanager
def transports(aliases: dict[str, str]) -> Iterator[None]:
    """``aliases`` for the URL schemes of :mod:`tulip_workers.reliable_redis`, for the
    block's length (whatever another test of this process installed before)."""
    saved = dict(kombu_transports.TRANSPORT_ALIASES)

    def use(table: dict[str, str]) -> None:
        kombu_transports.TRANSPORT_ALIASES.clear()
        kombu_transports.TRANSPORT_ALIASES.update(table)
        for scheme in reliable_redis.SCHEMES:
            kombu_transports._transport_cache.pop(scheme, None)

    use({**saved, **aliases})
    try:
        yield
    finally:
        use(saved)


@pytest.fixture
def reliable() -> Iterator[None]:
    """Our transport for ``redis`` URLs in this process, for the test's length."""
    with transports({}):
        reliable_redis.install()
        yield


@pytest.fixture
def stock() -> Iterator[None]:
    """kombu's own transport for ``redis`` URLs, for the test's length."""
    with transports(
        {
            "redis": "kombu.transport.redis:Transport",
            "rediss": "kombu.transport.redis:Transport",
            "sentinel": "kombu.transport.redis:SentinelTransport",
        }
    ):
        yield


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:10]}:"


def connect(redis_url: str, prefix: str) -> Connection:
    endpoint = broker_endpoint(redis_url)
    options = {
        **celeryconfig.broker_transport_options,
        **endpoint.transport_options,
        "global_keyprefix": prefix,
    }
    return Connection(endpoint.url, transport_options=options)


def publish(conn: Connection, bodies: list[str], queue: str = QUEUE) -> None:
    q = Queue(queue, exchange, routing_key=queue)
    with conn.Producer() as producer:
        for body in bodies:
            producer.publish(body, exchange=exchange, routing_key=queue, declare=[q])


def die_after_the_pop(
    conn: Connection, queue: str = QUEUE, got: list[Any] | None = None, lose_reply: bool = False
) -> Any:
    """On ``conn`` (the dying consumer's own), ask for a message, wait until Redis has
    taken it off the queue, then break the connection without reading the reply: the
    consumer's death, as Redis sees it. (Messages it delivers later go to ``got``.)"""
    sink = [] if got is None else got
    channel = conn.channel()
    channel.basic_consume(
        queue, no_ack=False, callback=lambda m: sink.append(m.decode()), consumer_tag="dying"
    )
    raw = redis.Redis(connection_pool=channel.pool)
    before = channel._size(queue)
    conn.transport.cycle._client_registered(channel, channel.client, "BRPOP")  # connects
    channel._brpop_start()
    deadline = time.monotonic() + 10
    while channel._size(queue) == before:
        assert time.monotonic() < deadline, "Redis never served the pop"
        time.sleep(0.01)
    sock = channel.client.connection._sock
    if lose_reply:
        sock.settimeout(5)
        assert sock.recv(1 << 20)
    sock.shutdown(socket.SHUT_RDWR)
    return channel, raw


def consume(conn: Connection, count: int, queue: str = QUEUE) -> list[str]:
    got: list[str] = []

    def on_message(body: str, message: Any) -> None:
        got.append(body)
        message.ack()

    with conn.Consumer(Queue(queue, exchange, routing_key=queue), callbacks=[on_message]):
        deadline = time.monotonic() + 10
        while len(got) < count and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                conn.drain_events(timeout=1)
    return got


def test_kombu_loses_the_message_a_consumer_died_holding(
    stock: None, redis_url: str, prefix: str
) -> None:
    """The failure this module exists for, shown on kombu's own transport."""
    with connect(redis_url, prefix) as conn:
        publish(conn, ["one", "two"])
        channel, _raw = die_after_the_pop(connect(redis_url, prefix))
        assert type(channel).__module__ == "kombu.transport.redis"
        assert restore_unacked(conn, [QUEUE]) == 0
        assert consume(conn, 2) == ["two"]  # "one" is nowhere


@pytest.mark.parametrize("spelling", ["redis", "sentinel"])
def test_a_consumer_that_died_after_the_pop_loses_nothing(
    reliable: None, spelling: str, request: pytest.FixtureRequest, prefix: str
) -> None:
    url = request.getfixturevalue("sentinel_url" if spelling == "sentinel" else "redis_url")
    with connect(url, prefix) as conn:
        publish(conn, ["one", "two", "three"])
        channel, raw = die_after_the_pop(connect(url, prefix))
        assert isinstance(channel, reliable_redis.Channel)
        held = reliable_redis.delivering_key(prefix, QUEUE)
        assert raw.llen(held) == 1  # the popped message waits on the delivering list
        assert restore_unacked(conn, [QUEUE]) == 1
        assert raw.llen(held) == 0
        assert consume(conn, 3) == ["one", "two", "three"]


def test_the_popped_message_goes_back_behind_the_unacked_ones(
    reliable: None, redis_url: str, prefix: str
) -> None:
    """A consumer with two in flight: "one" recorded as unacked, "two" popped only."""
    with connect(redis_url, prefix) as conn:
        publish(conn, ["one", "two", "three"])
        dying = connect(redis_url, prefix)
        first = dying.channel()
        first.basic_qos(prefetch_count=2)
        first.basic_consume(QUEUE, no_ack=False, callback=lambda m: None, consumer_tag="first")
        dying.transport.cycle._client_registered(first, first.client, "BRPOP")
        first._brpop_start()
        assert first._brpop_read()  # "one": now in the unacked hash, never acked
        assert first.qos._delivered
        die_after_the_pop(dying)  # "two": popped, the reply never read
        assert restore_unacked(conn, [QUEUE]) == 2
        assert consume(conn, 3) == ["one", "two", "three"]


def test_the_unacked_write_takes_the_message_off_the_delivering_list(
    reliable: None, redis_url: str, prefix: str
) -> None:
    held = reliable_redis.delivering_key(prefix, QUEUE)
    seen: list[tuple[int, int]] = []
    with connect(redis_url, prefix) as conn:
        publish(conn, ["one"])
        raw = redis.Redis(connection_pool=conn.default_channel.pool)

        def on_message(body: str, message: Any) -> None:
            seen.append((raw.llen(held), raw.hlen(f"{prefix}unacked")))
            message.ack()

        with conn.Consumer(Queue(QUEUE, exchange, routing_key=QUEUE), callbacks=[on_message]):
            conn.drain_events(timeout=5)
        assert seen == [(0, 1)]  # in exactly one place while it runs: the unacked hash
        assert (raw.llen(held), raw.hlen(f"{prefix}unacked")) == (0, 0)


def test_the_unacked_entry_is_the_item_received_and_only_that_item_leaves_the_list(
    reliable: None, redis_url: str, prefix: str
) -> None:
    """The script builds kombu's entry from the delivering list's own item (the message
    is not sent back), and takes that item, by its digest, not whatever is at the left
    end: here a second consumer's item, moved onto the list after ours."""
    held = reliable_redis.delivering_key(prefix, QUEUE)
    with connect(redis_url, prefix) as conn:
        publish(conn, ["one"])
        raw = redis.Redis(connection_pool=conn.default_channel.pool)
        item = raw.lindex(f"{prefix}{QUEUE}", -1)
        assert isinstance(item, bytes)
        channel = conn.channel()
        channel.basic_consume(QUEUE, no_ack=False, callback=lambda m: None, consumer_tag="c")
        conn.transport.cycle._client_registered(channel, channel.client, "BRPOP")
        deliver = channel.connection._deliver

        def another_consumer_moves_first(message: Any, queue: str) -> None:
            raw.lpush(held, b"another consumer's")
            deliver(message, queue)

        channel.connection._deliver = another_consumer_moves_first
        channel._brpop_start()
        assert channel._brpop_read()
        (entry,) = raw.hvals(f"{prefix}unacked")
        assert isinstance(entry, bytes)
        assert entry.startswith(b"[" + item + b",")  # the very bytes received
        assert json.loads(entry) == [json.loads(item), "memory", QUEUE]
        assert raw.lrange(held, 0, -1) == [b"another consumer's"]


def test_a_live_consumer_takes_back_a_reply_lost_to_a_broken_connection(
    reliable: None, redis_url: str, prefix: str
) -> None:
    with connect(redis_url, prefix) as conn:
        publish(conn, ["one", "two"])
        got: list[str] = []
        channel, raw = die_after_the_pop(conn, got=got, lose_reply=True)
        with pytest.raises(channel.connection_errors):
            channel._brpop_read()  # the connection broke with the reply unread
        channel._brpop_start()  # reconnects, puts "one" back at the head, asks again
        assert channel._brpop_read()
        assert got == ["one"]
        assert raw.llen(reliable_redis.delivering_key(prefix, QUEUE)) == 0


def test_a_connection_dropped_with_the_reply_unread_gives_the_message_back(
    reliable: None, redis_url: str, prefix: str
) -> None:
    """kombu's health check drops a connection whose reply is overdue, reading nothing."""
    with connect(redis_url, prefix) as conn:
        publish(conn, ["one", "two"])
        got: list[str] = []
        channel, raw = die_after_the_pop(conn, got=got, lose_reply=True)
        channel.client.connection.disconnect()  # what the health check does
        assert channel._in_poll is None
        channel._brpop_start()
        assert channel._brpop_read()
        assert got == ["one"]
        assert raw.llen(reliable_redis.delivering_key(prefix, QUEUE)) == 0


def test_a_new_connection_takes_back_a_reply_the_old_one_lost(
    reliable: None, redis_url: str, prefix: str
) -> None:
    """After a broker outage Celery's consumer starts over on a new connection and
    channel: the message whose reply the old one lost comes first, nothing stays on
    the delivering list (it used to stay there for good: the event was never applied)."""
    with connect(redis_url, prefix) as conn:
        publish(conn, ["one", "two"])
        channel, raw = die_after_the_pop(conn, lose_reply=True)
        with pytest.raises(channel.connection_errors):
            channel._brpop_read()  # the connection broke with the reply unread
    with connect(redis_url, prefix) as fresh:
        assert consume(fresh, 2) == ["one", "two"]
    assert raw.llen(reliable_redis.delivering_key(prefix, QUEUE)) == 0


@pytest.fixture
def refusals() -> Iterator[list[tuple[str, bytes, str]]]:
    """What is handed over as no kombu message: (queue, item, error class); the first
    one is refused (not filed), every later one filed."""
    seen: list[tuple[str, bytes, str]] = []

    def refuse(queue: str, item: bytes, error: Exception) -> bool:
        seen.append((queue, item, type(error).__name__))
        return len(seen) > 1

    before = reliable_redis.refuse_items_with(refuse)
    try:
        yield seen
    finally:
        reliable_redis.refuse_items_with(before)


def test_an_item_that_is_no_kombu_message_is_handed_over_then_dropped_and_the_queue_goes_on(
    reliable: None,
    redis_url: str,
    prefix: str,
    refusals: list[tuple[str, bytes, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not JSON, and JSON without kombu's envelope (kombu's Redis transport counts that
    KeyError as a connection error): each is handed over; one not filed comes back
    first, one filed is gone, and the message behind them is delivered."""
    items = [b"\x00 not json", b'{"body": "eA=="}']
    with connect(redis_url, prefix) as conn:
        publish(conn, ["after"])
        raw = redis.Redis(connection_pool=conn.default_channel.pool)
        for item in reversed(items):
            raw.rpush(f"{prefix}{QUEUE}", item)  # the head (consumed first): items[0]
        assert consume(conn, 1) == ["after"]
        assert raw.llen(reliable_redis.delivering_key(prefix, QUEUE)) == 0
        assert raw.llen(f"{prefix}{QUEUE}") == 0
    assert refusals == [
        (QUEUE, items[0], "JSONDecodeError"),  # not filed: back at the head
        (QUEUE, items[0], "JSONDecodeError"),
        (QUEUE, items[1], "KeyError"),
    ]
    assert caplog.text.count("not a kombu message") == 2


def test_other_queues_keep_kombus_consume(reliable: None, redis_url: str, prefix: str) -> None:
    """Not an ordered shard queue (many consumers): no delivering list to restore."""
    with connect(redis_url, prefix) as conn:
        publish(conn, ["x"], queue="memory.summarize")
        assert consume(conn, 1, queue="memory.summarize") == ["x"]
        raw = redis.Redis(connection_pool=conn.default_channel.pool)
        assert raw.llen(reliable_redis.delivering_key(prefix, "memory.summarize")) == 0

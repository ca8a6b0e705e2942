"""Ordered queues on Redis survive a killed worker: its unacked messages go back first.

With ``acks_late`` on kombu's Redis transport, a delivered message sits in the
``unacked`` hash (plus the ``unacked_index`` sorted set) until it is acked. If the
worker is SIGKILLed mid-task, kombu puts the message back only after the visibility
timeout (hours here), while the restarted shard worker goes on with the *later*
messages of the same queue: order per namespace (invariant 1) breaks.

Every shard queue has exactly one consumer, so when a shard worker starts, anything
still unacked for its queues belongs to a dead predecessor. :func:`restore_unacked`
moves those messages back to the head of their queues, oldest first, atomically
(``lua/restore_unacked.lua``), before the worker consumes anything; :func:`install`
wires that into Celery's worker start-up (``celeryd_after_setup``, which
``Worker.on_start`` sends before the blueprint starts the consumer).

A message that kills every worker that runs it (OOM, a segfault in a native library)
would come back this way forever (and on RabbitMQ, which needs no restore: it requeues
a dead consumer's unacked messages itself, in place, marked redelivered). So each
*run* of an ordered task counts, on every broker, in the Redis of ``TULIP_REDIS_URL``
(the Redis broker itself unless set; a RabbitMQ deployment has one): :func:`running`
adds one to ``tulip:deaths:<task id>`` (kept a week) as the run starts and deletes it
when the run ends, however it ends. A counter still there when the message comes back
holds exactly the runs that never ended, the deaths, read by :func:`deaths` for a
redelivered message: past ``TULIP_MAX_WORKER_DEATHS`` the task dead-letters it
instead of running it. A shard worker reserves several messages and runs several at
once: a message only waiting in a dead worker's buffer never started, so it is not
counted, and a redelivered message that was running when a worker died (a count above
zero) runs alone (``tulip_workers.keyed``), so a second death is its own.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import redis
from celery import Celery, signals
from celery.exceptions import WorkerShutdown
from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps, loads

from tulip_memory.credentials import redact_url
from tulip_wire.endpoints import redis_client
from tulip_wire.scripts import lua
from tulip_wire.topology import DEATHS_PREFIX, is_ordered_queue
from tulip_workers import fencing, reliable_redis
from tulip_workers.parking import parking
from tulip_workers.reliable_redis import delivering_key

#: The exit status of a worker that stops before it consumes (it cannot start safely):
#: these start-up hooks, readiness's and priority's.
EXIT_FAILURE = 1
#: How long a message's death count is kept (longer than any backlog lasts).
DEATHS_TTL = 7 * 24 * 3600
#: What redis-py returns for a key or value: bytes (kombu never decodes responses).
_Raw = bytes | str

logger = logging.getLogger(__name__)
_RESTORE = lua(__file__, "restore_unacked.lua")


@dataclass(frozen=True)
class _Move:
    """One unacked message going back to one queue list."""

    tag: _Raw
    entry: _Raw  # the hash value as read: the script moves it only if unchanged
    queue_key: str
    payload: str


def restore_unacked(
    connection_or_channel: Any, queues: Iterable[str], fence: fencing.Fence | None = None
) -> int:
    """Move every unacked message of ``queues`` back to the head of its queue.

    Takes a kombu ``Connection`` or Redis ``Channel``. Messages go back oldest first
    (by kombu's delivery time), marked redelivered like kombu's own restore does, and
    leave kombu's unacked hash and index in the same atomic step; behind them goes what
    the dead consumer had popped and not yet recorded (each queue's delivering list,
    :mod:`tulip_workers.reliable_redis`). Messages that could
    also belong to a queue not in ``queues`` are left alone. Returns how many moved.

    Only safe when nobody else consumes ``queues`` right now: a shard worker holding
    their lease (``fence``: the restore runs only while the lease carries its token,
    :mod:`tulip_workers.fencing`), or one that is their only consumer by deployment.
    """
    channel = _redis_channel(connection_or_channel)
    if not channel.ack_emulation:
        return 0
    client = redis.Redis(connection_pool=channel.pool)
    prefix = channel.global_keyprefix
    hash_key, index_key = prefix + channel.unacked_key, prefix + channel.unacked_index_key
    entries = _unacked_oldest_first(client, hash_key, index_key)
    own = sorted(set(queues))
    moves = _plan(channel, entries, frozenset(queues))
    lists = [key for q in own for key in (delivering_key(prefix, q), _queue_key(channel, q, {}))]
    keys = [hash_key, index_key, *(m.queue_key for m in moves), *lists]
    args = [*(value for m in moves for value in (m.tag, m.entry, m.payload)), len(own)]
    if fence is not None:
        script = client.register_script(fencing.guarded(_RESTORE))
        return int(script(keys=[*keys, fence.key], args=[*args, fence.token]))
    return int(client.register_script(_RESTORE)(keys=keys, args=args))


@contextmanager
def running(queue: str | None, task_id: str, redis_url: str | None) -> Iterator[None]:
    """One run of ``task_id`` (delivered from ``queue``) added to its death counter in
    ``redis_url`` until the run ends, so a death while it runs is counted against it
    (nothing without a Redis, nor for a call that came from no queue). A Redis that
    cannot be reached here is logged, never fatal: the count is a safety net."""
    client = None if queue is None else _counter_client(redis_url)
    key = f"{DEATHS_PREFIX}{task_id}"
    try:
        if client is not None:
            pipe = client.pipeline()
            pipe.incr(key)
            pipe.expire(key, DEATHS_TTL)
            pipe.execute()
    except Exception:
        logger.warning("could not count the run of %s", task_id, exc_info=True)
        client = None
    try:
        yield
    finally:
        if client is not None:
            try:
                client.delete(key)
            except Exception:  # the count outlives the message by a week at most
                logger.warning("could not drop the run count of %s", task_id, exc_info=True)


@functools.cache
def _counter_client(redis_url: str | None) -> redis.Redis | None:
    if redis_url is None:
        logger.warning("no TULIP_REDIS_URL: deaths of workers are not counted")
        return None
    return redis_client(redis_url, socket_timeout=5, socket_connect_timeout=5)


def deaths(task_id: str, redis_url: str | None) -> int:
    """How many workers died running the message of ``task_id`` (its runs that never
    ended; 0 without a Redis)."""
    client = _counter_client(redis_url)
    return 0 if client is None else int(client.get(f"{DEATHS_PREFIX}{task_id}") or 0)


def ordered_queues(names: Iterable[str]) -> list[str]:
    """The shard queues among ``names`` (``memory.extract.*``, ``memory.checkpoint.*``)."""
    return sorted(name for name in names if is_ordered_queue(name))


def restore_for_worker(app: Celery, queue_names: Iterable[str]) -> int:
    """Restore the unacked messages of a starting worker's shard queues (Redis only).

    A failure stops the worker (``WorkerShutdown``): consuming without the restore
    would break the order this exists to keep.
    """
    queues = ordered_queues(queue_names)
    if not queues:
        return 0
    with app.connection_for_write() as connection:
        if connection.transport.driver_type != "redis":
            return 0
        try:
            connect_loudly(connection, app.conf.broker_connection_max_retries)
            restored = restore_unacked(connection, queues)
            if (parked := parking()) is not None and len(queues) == 1:
                parked.start(_redis_channel(connection), queues[0], restored)
        except Exception as e:
            logger.critical("could not restore unacked messages of %s", queues, exc_info=True)
            raise WorkerShutdown(EXIT_FAILURE) from e
    if restored:
        logger.warning("restored %d unacked message(s) to the head of %s", restored, queues)
    return restored


#: Pauses between broker connection attempts at start: the first retry at once, then
#: every few seconds, each failure logged with the (credential-free) URL.
_CONNECT_INTERVALS = {"interval_start": 0, "interval_step": 2, "interval_max": 5}


def connect_loudly(connection: Any, max_retries: int | None) -> None:
    """``connection.ensure_connection``, logging at once and on every failed attempt
    which broker it is trying (credentials stripped) and why, so a worker whose
    broker is down says so instead of printing nothing."""
    where = redact_url(connection.as_uri())

    def failed(error: BaseException, interval: float) -> None:
        logger.error(
            "cannot reach the broker at %s (TULIP_BROKER_URL): %s; retrying in %.0fs",
            where,
            error,
            interval,
        )

    logger.info("connecting to the broker at %s", where)
    connection.ensure_connection(errback=failed, max_retries=max_retries, **_CONNECT_INTERVALS)


def install(app: Celery, *, leases: bool = True) -> None:
    """Before each worker of ``app`` consumes, restore its shard queues' unacked messages;
    and consume shard queues so that none is lost between pop and unacked write
    (:mod:`tulip_workers.reliable_redis`, installed for the process).

    With ``leases`` (the workers' case) a worker consumes a shard queue on Redis only
    once it holds its lease, and restores it then (:mod:`tulip_workers.lease`);
    without, it restores its shard queues at start, as their only consumer."""
    reliable_redis.install()
    if leases:
        from tulip_workers.lease import install as install_leases

        install_leases(app)

    def restore_before_consuming(instance: Any = None, **_: Any) -> None:
        if instance is None or instance.app is not app:
            return
        if leases:
            from tulip_workers.lease import defer

            defer(app, instance)
        else:
            restore_for_worker(app, instance.app.amqp.queues.consume_from)

    signals.celeryd_after_setup.connect(
        restore_before_consuming, weak=False, dispatch_uid=f"tulip-redelivery-{id(app)}"
    )


def _redis_channel(connection_or_channel: Any) -> Any:
    channel = getattr(connection_or_channel, "default_channel", connection_or_channel)
    if not isinstance(channel, kombu_redis.Channel):
        raise TypeError(f"needs kombu's Redis transport, got {type(channel).__name__}")
    return channel


def _unacked_oldest_first(
    client: redis.Redis, hash_key: str, index_key: str
) -> list[tuple[_Raw, _Raw]]:
    entries = client.hgetall(hash_key)
    index = cast(list[tuple[_Raw, float]], client.zrange(index_key, 0, -1, withscores=True))
    delivered = dict(index)
    # An entry missing from the index (never expected) goes last rather than nowhere.
    return sorted(entries.items(), key=lambda item: (delivered.get(item[0], math.inf), item[0]))


def _plan(channel: Any, entries: list[tuple[_Raw, _Raw]], wanted: frozenset[str]) -> list[_Move]:
    routes: dict[tuple[str, str], list[str]] = {}
    moves: list[_Move] = []
    for tag, entry in entries:
        payload, exchange, routing_key = loads(bytes_to_str(entry))
        route = (exchange, routing_key)
        if route not in routes:
            routes[route] = _own_queues(channel, exchange, routing_key, wanted)
        redelivered = _mark_redelivered(payload)
        moves += [
            _Move(tag, entry, _queue_key(channel, q, payload), redelivered) for q in routes[route]
        ]
    return moves


def _own_queues(channel: Any, exchange: str, routing_key: str, wanted: frozenset[str]) -> list[str]:
    """Where kombu's own restore would put the message, if all of it is ours."""
    queues = [str(queue) for queue in channel._lookup(exchange, routing_key)]
    return queues if queues and wanted.issuperset(queues) else []


def _queue_key(channel: Any, queue: str, payload: dict[str, Any]) -> str:
    priority = channel._get_message_priority(payload, reverse=False)
    return str(channel.global_keyprefix + channel._q_for_pri(queue, priority))


def _mark_redelivered(payload: dict[str, Any]) -> str:
    """The payload as kombu's ``_do_restore_message`` re-queues it."""
    payload.get("headers", {})["redelivered"] = True
    payload.get("properties", {}).get("delivery_info", {})["redelivered"] = True
    return str(dumps(payload))

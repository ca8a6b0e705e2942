"""One owner per shard queue: a lease in Redis, a standby that takes over, a clean handover.

Order per namespace (or thread) rests on one consumer per shard queue. A worker started
for a shard queue on Redis therefore consumes it only while it holds the queue's
*lease* (``tulip:lease:<queue>``: a hash of the fencing token and the owner's name that
expires unless renewed, taken with ``lua/lease_acquire.lua``: set only if absent, the
token one more than the last one ever given). Until it has it, the worker is a
*standby*: it runs, answers Flower and ``celery inspect``, says ``standby for <queue>:
owned by <name>`` in its log, is listed in ``tulip:standby:<queue>`` (the metrics'
``tulip_shard_standby``), and consumes nothing: its shard queues are taken out of what
Celery consumes at start-up (``celeryd_after_setup``) and added back, with the consumer's
own ``add_task_queue`` (what ``celery control add_consumer`` runs), once it owns them.

- **Takeover.** The lease taken, the new owner first restores, behind its token, what
  the previous owner left: its unacked and delivering messages go back to the head of
  the queue, oldest first, and its parked keys are loaded, none taken back before those
  (:mod:`tulip_workers.redelivery`, :mod:`tulip_workers.parking`); then it consumes.
- **Heartbeat.** The owner renews every third of ``TULIP_SHARD_LEASE_SECONDS``
  (``lua/lease_keep.lua``, only while the lease carries its token). While Redis cannot
  be reached it retries every tenth, and no event starts once the lease is past its
  local deadline. A lease that lapsed meanwhile (a Redis restart, an outage longer than
  the lease) and that nobody took since (the token counter is still at the owner's
  token) is taken back with the same token, and the shard goes on where it was; a
  renewal that finds the lease taken by another, or the counter gone (a Redis that lost
  its data), ends the process (:func:`tulip_workers.fencing.lost`). Every script that
  changes the queue is fenced by the token anyway, so a paused owner that wakes up after
  a takeover consumes and acks nothing more.
- **Failover.** A standby asks every tenth of the lease (at most every second); an owner
  that died (SIGKILL, host loss) is replaced at most one lease length plus one ask after
  its last renewal.
- **Handover.** A warm shutdown (SIGTERM) finishes the tasks in hand and acks them,
  restores the reserved ones not started, oldest first, and releases the lease
  (``worker_shutdown``): a standby takes over within one ask.

RabbitMQ needs none of this: ordered queues are declared ``x-single-active-consumer``,
and the broker itself delivers to one consumer and switches to the next when its
connection closes (``docs/shards.md``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from time import monotonic, time
from typing import Any

import redis
from celery import Celery, bootsteps, signals

from tulip_wire.scripts import lua
from tulip_wire.topology import fence_key, lease_key, standby_key
from tulip_workers import fencing
from tulip_workers.parking import parking
from tulip_workers.redelivery import (
    EXIT_FAILURE,
    _redis_channel,
    connect_loudly,
    ordered_queues,
    restore_unacked,
)
from tulip_workers.runtime import event_worker_for, runtime
from tulip_workers.settings import SHARD_LEASE_SECONDS

log = logging.getLogger(__name__)
_ACQUIRE = lua(__file__, "lease_acquire.lua")
_RENEW = lua(__file__, "lease_renew.lua")
_KEEP = lua(__file__, "lease_keep.lua")
#: What :meth:`ShardLease.keep` returns.
LOST, RENEWED, TAKEN_BACK = 0, 1, 2
#: A standby's listing outlives this many of its asks.
STANDBY_LISTED_ASKS = 5


class ShardLease:
    """The lease of one shard queue in one Redis (names under ``prefix``)."""

    def __init__(self, client: redis.Redis, prefix: str, queue: str, seconds: float) -> None:
        self.queue = queue
        self.key = prefix + lease_key(queue)
        self.ms = max(1, int(seconds * 1000))
        self._client = client
        self._fence = prefix + fence_key(queue)
        self._standby = prefix + standby_key(queue)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._keep = client.register_script(_KEEP)

    def acquire(self, owner: str) -> tuple[int, str]:
        """``(token, owner)`` when taken, ``(0, the holder)`` when another holds it."""
        now = int(time() * 1000)
        token, holder = self._acquire(keys=[self.key, self._fence], args=[owner, self.ms, now])
        return int(token), _text(holder)

    def renew(self, token: int) -> bool:
        return bool(self._renew(keys=[self.key], args=[token, self.ms]))

    def keep(self, owner: str, token: int) -> int:
        """Renew the lease, or take it back with ``token`` when it lapsed and nobody took
        it since: :data:`RENEWED`, :data:`TAKEN_BACK`, or :data:`LOST`."""
        return int(self._keep(keys=[self.key, self._fence], args=[owner, token, self.ms]))

    def release(self, token: int) -> bool:
        return bool(self._renew(keys=[self.key], args=[token, 0]))

    def list_standby(self, name: str, ask_every: float) -> None:
        now = int(time() * 1000)
        pipe = self._client.pipeline()
        pipe.zremrangebyscore(self._standby, "-inf", now)
        pipe.zadd(self._standby, {name: now + int(STANDBY_LISTED_ASKS * ask_every * 1000) + 1000})
        pipe.execute()

    def unlist_standby(self, name: str) -> None:
        self._client.zrem(self._standby, name)


class Keeper(threading.Thread):
    """Takes, keeps and hands over one shard queue's lease for this worker's consumer."""

    def __init__(self, consumer: Any, queue: str, seconds: float) -> None:
        super().__init__(name=f"tulip-lease-{queue}", daemon=True)
        self.consumer = consumer
        self.queue = queue
        self.seconds = seconds
        self.owner = f"{consumer.hostname}/{os.getpid()}"  # two on one host differ
        self.ask_every = min(1.0, seconds / 10)
        self.state = "standby"
        self.holder = ""
        self.token = 0
        self._stopping = threading.Event()
        self._connection = consumer.app.connection_for_write()
        connect_loudly(self._connection, consumer.app.conf.broker_connection_max_retries)
        channel = _redis_channel(self._connection)
        client = redis.Redis(connection_pool=channel.pool)
        self.lease = ShardLease(client, channel.global_keyprefix, queue, seconds)

    def run(self) -> None:
        self._warm()
        try:
            while not self._stopping.is_set():
                asked = monotonic()
                try:
                    token, holder = self.lease.acquire(self.owner)
                    if token:
                        self._take_over(token, asked)
                        self._keep()
                        return
                    self._wait(holder)
                except redis.RedisError as e:
                    log.warning("could not ask for the lease of %s (%s)", self.queue, e)
                self._stopping.wait(self.ask_every)
        except Exception:
            log.exception("the lease keeper of %s stopped", self.queue)
            if self.token:
                fencing.lost(self.queue, "its keeper failed")

    def _warm(self) -> None:
        """Before asking: the event worker of the queue built and its database checked,
        as its first event would, so a takeover does not wait for that (seconds)."""
        make = event_worker_for(self.queue)
        if make is None:
            return
        try:
            rt = runtime()
            rt.run(make(rt).ready())
        except Exception as e:  # the first event meets it again, and says so
            log.warning("could not warm the event worker of %s (%s)", self.queue, e)

    def _wait(self, holder: str) -> None:
        if holder != self.holder:
            log.warning(
                "standby for %s: owned by %s; takes over when its lease lapses (%.1fs)",
                self.queue,
                holder,
                self.seconds,
            )
            self.holder = holder
        self.lease.list_standby(self.owner, self.ask_every)

    def _take_over(self, token: int, asked: float) -> None:
        fence = fencing.Fence(self.queue, self.lease.key, str(token), asked + self.seconds)
        fence.keep = self._kept
        fencing.hold(fence)
        self.token = token
        try:
            restored = restore_unacked(self._connection, [self.queue], fence)
            if (parked := parking()) is not None:
                parked.start(_redis_channel(self._connection), self.queue, restored)
        except Exception:  # consuming without the restore would break the order
            log.critical("could not restore unacked messages of %s", [self.queue], exc_info=True)
            with contextlib.suppress(redis.RedisError):
                self.lease.release(token)
            fencing.end(EXIT_FAILURE)
        if restored:
            log.warning("restored %d unacked message(s) to the head of %s", restored, [self.queue])
        self.lease.unlist_standby(self.owner)
        self.state, self.holder = "owner", self.owner
        log.warning("owner of %s (fencing token %d); consuming", self.queue, token)
        consume = _consume_from(self.consumer, self.queue)
        hub = getattr(self.consumer, "hub", None)
        if hub is not None:
            hub.call_soon(consume)
        else:
            consume()

    def _keep(self) -> None:
        """Renew every third of the lease; while Redis cannot be reached, retry every
        tenth (no event starts once the lease is past its local deadline,
        :func:`tulip_workers.fencing.await_valid`); a lease that lapsed meanwhile and
        that nobody took since is taken back with the same token; one another took (or a
        Redis that lost the token counter) ends the process."""
        every = self.seconds / 3
        while not self._stopping.wait(every):
            try:
                if not self._kept():
                    fencing.lost(self.queue, "its renewal found the lease another's")
                every = self.seconds / 3
            except redis.RedisError as e:
                log.warning("could not renew the lease of %s (%s); retrying", self.queue, e)
                every = self.seconds / 10

    def _kept(self) -> bool:
        """Renew the lease or take it back (:meth:`ShardLease.keep`); False if lost."""
        fence = fencing.fence_of(self.queue)
        assert fence is not None
        asked = monotonic()
        kept = self.lease.keep(self.owner, self.token)
        if kept == LOST:
            return False
        if kept == TAKEN_BACK:
            log.warning(
                "took the lease of %s back (fencing token %d): it lapsed while Redis could "
                "not be reached and nobody took it since",
                self.queue,
                self.token,
            )
        fencing.renewed(fence, asked + self.seconds)
        return True

    def hand_over(self) -> None:
        """At a warm shutdown, after the tasks in hand were acked: the reserved ones
        back to the head of the queue, oldest first, and the lease released."""
        self._stopping.set()
        if self.state != "owner":
            with contextlib.suppress(redis.RedisError):
                self.lease.unlist_standby(self.owner)
            return
        fence = fencing.fence_of(self.queue)
        assert fence is not None
        try:
            restored = restore_unacked(self._connection, [self.queue], fence)
            self.lease.release(self.token)
        except redis.ResponseError as e:
            if fencing.FENCED_REPLY in str(e):
                log.warning("the lease of %s was lost before its release", self.queue)
                return
            raise
        log.warning(
            "released the lease of %s (%d reserved message(s) back at the head of the queue)",
            self.queue,
            restored,
        )

    def describe(self) -> str:
        if self.state == "owner":
            return f"owner (fencing token {self.token})"
        return f"standby (owned by {self.holder or 'nobody yet'})"


def _consume_from(consumer: Any, queue: str) -> Any:
    def consume() -> None:
        consumer.add_task_queue(queue)

    return consume


#: The shard queues each app's worker leaves to its leases (taken out of what Celery
#: consumes at start-up), and this process's keepers.
_deferred: dict[int, list[str]] = {}
_keepers: dict[str, Keeper] = {}


def defer(app: Celery, worker: Any) -> None:
    """At a worker's start (``celeryd_after_setup``): its shard queues on Redis are
    consumed once it holds their leases (:class:`ShardLeases`), not from the start; it
    waits for the broker here, saying which one it cannot reach (:func:`connect_loudly`)."""
    queues = ordered_queues(app.amqp.queues.consume_from)
    if not queues:
        return
    with app.connection_for_write() as connection:
        if connection.transport.driver_type != "redis":
            return  # RabbitMQ: x-single-active-consumer does it (docs/shards.md)
        # As the restore at start did: a broker that is down is named at once and at
        # every attempt (Celery's consumer retries quietly about which one).
        connect_loudly(connection, app.conf.broker_connection_max_retries)
    for queue in queues:
        app.amqp.queues.deselect(queue)
    _deferred[id(app)] = queues


class ShardLeases(bootsteps.StartStopStep):  # type: ignore[misc]
    """Consumer bootstep: a lease keeper per deferred shard queue, started once (the
    consumer's restart after a broker outage keeps them); their states in
    ``celery inspect stats`` (Flower's worker page) under ``shards``."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, c: Any) -> None:
        seconds = SHARD_LEASE_SECONDS.read()
        for queue in _deferred.get(id(c.app), []):
            if queue not in _keepers:
                keeper = _keepers[queue] = Keeper(c, queue, seconds)
                keeper.start()

    def info(self, c: Any) -> dict[str, Any]:
        return {"shards": {q: k.describe() for q, k in _keepers.items()}}


def hand_over_all(**_: Any) -> None:
    """``worker_shutdown``: every lease this process holds handed over."""
    for keeper in list(_keepers.values()):
        try:
            keeper.hand_over()
        except Exception:
            log.exception("could not hand over the lease of %s", keeper.queue)


def install(app: Celery) -> None:
    """Shard queues of ``app``'s workers on Redis consumed under leases."""
    app.steps["consumer"].add(ShardLeases)
    signals.worker_shutdown.connect(
        hand_over_all, weak=False, dispatch_uid=f"tulip-leases-{id(app)}"
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value

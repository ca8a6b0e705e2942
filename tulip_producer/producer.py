"""Publishing events without making a user wait or losing a conversation.

:meth:`Producer.session_ended` validates and encodes the event, then hands it to the
broker as a Celery task message on its shard queue, with a per-key sequence number from
Redis. Every step of a publish is bounded by ``publish_timeout`` (socket timeouts, no
connection retry loop), and when the broker or Redis fails the event goes to the durable
:class:`~tulip_producer.spool.Spool` instead; the call returns its event id either way. A
background flusher re-publishes spooled events in order once the broker is back.

Order per key holds because (1) calls for one key run one at a time under that key's
lock, (2) while anything is spooled, new events are spooled behind it, and (3) a spooled
row is removed only after it was published, so "spool empty" means "everything before
was published". The flusher therefore needs no key lock, and a slow attempt of the
flusher never delays a caller.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from types import TracebackType
from typing import Any, Self

import redis
from celery import Celery
from kombu import Queue
from kombu.exceptions import ChannelError
from redis.backoff import NoBackoff
from redis.retry import Retry

from tulip_memory.credentials import redact_url
from tulip_memory.delta.known import MESSAGES, Known, checkpoint_data, known_after
from tulip_memory.errors import TulipMemoryError
from tulip_memory.messages import Message
from tulip_memory.state import AgentState
from tulip_memory.store.validation import NS_SEP, validate_namespace
from tulip_producer.bases import PublishedBases
from tulip_producer.direct import DirectPublisher, PendingPush, send_event, who
from tulip_producer.quota import QuotaExceeded
from tulip_producer.settings import ProducerSettings
from tulip_producer.spool import Spool, SpooledEvent
from tulip_wire import events
from tulip_wire import forget as scopes
from tulip_wire.claimcheck import ClaimCheckStore
from tulip_wire.endpoints import broker_endpoint, redis_client, scheme_of
from tulip_wire.events import (
    ALL_TASKS,
    CHECKPOINT_SAVED,
    ROLE_OF,
    SEQ_ROOM,
    SESSION_ENDED,
    TASKS,
    Encoded,
    Envelope,
    EventError,
    PayloadRef,
    decode,
    encode,
    namespace_key,
    tenant_of_key,
    thread_key,
)
from tulip_wire.numbering import NUMBER_EVENT, OVER_QUOTA
from tulip_wire.pending import PendingStates, sealed
from tulip_wire.published import PublishedEvents
from tulip_wire.routing import ShardRouter, stable_hash
from tulip_wire.shardlayout import MalformedLayout, Resharding, ShardLayout, layout_key
from tulip_wire.signing import SIG_ROOM, signer_of
from tulip_wire.statedelta import NotJSON, advance, canonical
from tulip_wire.topology import (
    CHECKPOINT_QUEUE_PREFIX,
    EXTRACT_QUEUE_PREFIX,
    SPOOL_REPORT_PREFIX,
    forgetting_key,
    quota_key,
    seq_key,
)

KEY_LOCK_STRIPES = 64
FLUSH_BATCH = 100
RETRY_MIN_DELAY = 0.05
RETRY_MAX_DELAY = 2.0
SPOOL_REPORT_EVERY = 5.0  # seconds between spool-depth reports to Redis (the metrics)
SPOOL_REPORT_TTL = 60  # a stopped producer's report expires
IDLE_POLL = 1.0  # also notices rows spooled by another process sharing the directory
DEFAULT_CLOSE_TIMEOUT = 5.0

log = logging.getLogger(__name__)


class ProducerClosed(TulipMemoryError, RuntimeError):
    """A call on a producer after :meth:`Producer.close`."""


class PublishError(TulipMemoryError):
    """A publish that must not be spooled (a replay) failed; ``reason`` says why."""

    def __init__(self, event_id: str, reason: str) -> None:
        self.event_id = event_id
        self.reason = reason
        super().__init__(f"event {event_id} was not published: {reason}")


# --- broker plumbing: pure functions, no I/O --------------------------------------


def transport_options(settings: ProducerSettings) -> dict[str, Any]:
    """Bound every step of a publish by ``publish_timeout``, with no kombu retry loop.

    ``max_retries=0``: even with ``send_task(retry=False)``, kombu's connection setup
    retries, sleeping 2 s between attempts, until ``broker_connection_timeout`` has
    passed (6 s for a refused connection with Celery's defaults). Redis: without socket
    timeouts a command on a broker that accepted the connection but never answers
    waits forever. RabbitMQ: publisher confirms, so a publish returns only once the
    broker has the message.
    """
    t = settings.publish_timeout
    if settings.broker_is_amqp:
        return {"max_retries": 0, "confirm_publish": True, "read_timeout": t, "write_timeout": t}
    return {"max_retries": 0, "socket_timeout": t, "socket_connect_timeout": t}


def routers(settings: ProducerSettings) -> dict[str, ShardRouter]:
    """The shard router of each event type."""
    return {
        SESSION_ENDED: ShardRouter(EXTRACT_QUEUE_PREFIX, settings.extract_shards),
        CHECKPOINT_SAVED: ShardRouter(CHECKPOINT_QUEUE_PREFIX, settings.checkpoint_shards),
    }


def extract_queues(settings: ProducerSettings) -> list[Queue]:
    """Every shard queue, declared as the workers declare them (``tulip_wire.celeryconfig``).

    Declaring on publish matters: both brokers route through bindings, so a message
    published before any worker declared its queue would be undeliverable. RabbitMQ
    refuses a queue redeclared with other arguments, so ordered queues carry
    ``x-single-active-consumer`` here as in ``tulip_wire.celeryconfig``.
    """
    from tulip_wire.celeryconfig import kombu_queue

    amqp = settings.broker_is_amqp
    return [
        kombu_queue(name, ordered=True, amqp=amqp)
        for router in routers(settings).values()
        for name in router.queues()
    ]


def celery_app(settings: ProducerSettings) -> Celery:
    """A Celery app configured from ``tulip_wire.celeryconfig`` on the producer's broker."""
    app = Celery("tulip_memory.producer", set_as_current=False)
    app.config_from_object("tulip_wire.celeryconfig")
    broker = broker_endpoint(settings.broker_url)
    app.conf.update(
        broker_url=broker.url,
        broker_use_ssl=broker.use_ssl,
        broker_connection_timeout=settings.publish_timeout,
        broker_heartbeat=0,  # a pure publisher never services heartbeats
        broker_transport_options={
            **app.conf.broker_transport_options,
            **broker.transport_options,
            **transport_options(settings),
        },
        task_queues=extract_queues(settings),
        # No task-sent event per publish (one round trip less): Flower still sees every
        # task from the workers' received/started/succeeded events.
        task_send_sent_event=False,
    )
    return app


# --- publishing one envelope ------------------------------------------------------


class _Publisher:
    """Hands one envelope to the broker: sequence number, claim-check, Celery message."""

    def __init__(self, settings: ProducerSettings, claims: ClaimCheckStore) -> None:
        self._claims = claims
        self._last_claim: tuple[str, PayloadRef] | None = None
        self.signer = signer_of(settings.signing_key)
        # What an unnumbered encoding may weigh: its number (and signature) still to come.
        room = SEQ_ROOM + (SIG_ROOM if self.signer is not None else 0)
        self._max_unnumbered = settings.max_event_bytes - room
        self._routers = routers(settings)
        self._redis = _redis_client(settings)
        self._pending = PendingStates(self._redis)
        self._pending_ttl = settings.pending_ttl
        self._status_ttl = settings.status_ttl
        self._seq_idle_ms = int(settings.seq_idle_ttl * 1000)
        self._quota = settings.quota
        self._number = self._redis.register_script(NUMBER_EVENT)
        self._app = celery_app(settings)
        self._amqp = settings.broker_is_amqp
        self._queues: dict[str, Queue] = {q.name: q for q in self._app.conf.task_queues}
        # Our own pool, not kombu's process-global one, so close() releases only ours.
        limit = self._app.conf.broker_pool_limit
        self._connections = self._app.connection_for_write().Pool(limit=limit)
        self._options = (
            {"confirm_timeout": settings.publish_timeout} if settings.broker_is_amqp else {}
        )
        self._direct = (
            DirectPublisher.create(self._redis, settings, self._app, _redis_queue)
            if direct_possible(settings, self._app)
            else None
        )

    def publish(
        self,
        env: Envelope,
        pending: _Pending | None = None,
        encoded: Encoded | None = None,
        *,
        quota: bool = True,
    ) -> None:
        """Publish ``env`` (``encoded``: its encoding, when the caller has it already),
        taking a token of its tenant's quota unless ``quota`` is off (a spooled event
        was taken at the door already). A claim check is put before either path, once
        for both."""
        wire = self._outgoing(encoded if encoded is not None else Encoded.of(env))
        if scopes.is_tenant_erase(env.type, env.payload):
            # Before it is published: every event published after it sees the marker
            # on any shard and waits until the erase is done (docs/forget.md).
            marker = scopes.marker_value(env.id, env.ts)
            self._redis.set(forgetting_key(tenant_of_key(env.key)), marker)
        if self._direct is not None and env.type in TASKS:
            push = None if pending is None else self._push(pending)
            if self._direct.publish(wire, self._routers[env.type], push, quota=quota) is not None:
                return
        self._publish(wire, pending, quota)

    def _push(self, pending: _Pending) -> PendingPush:
        key = PendingStates.key(pending.tenant, pending.thread_id)
        return PendingPush(key, pending.entry, int(self._pending_ttl * 1000))

    def _publish(self, wire: Encoded, pending: _Pending | None, quota: bool = True) -> None:
        """Assign the key's next sequence number, mark the id published, append the
        save to its thread's pending list (one round trip for all), and send.

        One script (``tulip_wire/lua/number_event.lua``): the pending list is in the
        order of the sequence numbers, whatever other producers do meanwhile, and an
        over-quota publish writes nothing (:class:`~tulip_producer.quota.QuotaExceeded`)."""
        env = wire.env
        role = ROLE_OF[env.type]
        keys = [seq_key(env.key), PublishedEvents.key(env.id)]
        keys += [layout_key(self._routers[role].prefix), quota_key(tenant_of_key(env.key))]
        args: list[str | int | float] = [self._seq_idle_ms, int(self._status_ttl * 1000), env.key]
        args += self._quota.args() if quota else ("0", 0)
        if pending is not None:
            keys.append(PendingStates.key(pending.tenant, pending.thread_id))
            args += [pending.entry, int(self._pending_ttl * 1000)]
        seq, layout = self._number(keys=keys, args=args)
        if int(seq) == OVER_QUOTA:
            raise self._quota.exceeded(tenant_of_key(env.key), int(layout))
        router = self._router(role, layout)  # Resharding: the caller spools it
        numbered = env.with_seq(int(seq))
        if self.signer is None:
            self.send(numbered, wire.numbered(int(seq)), router)
        else:
            self.send(numbered, encode(self.signer.sign(numbered)), router)

    def report_spool(self, producer: str, depth: int) -> None:
        """Tell ``tulip-memory metrics`` how many events this producer holds in its
        spool (a key that expires when the producer stops reporting)."""
        self._redis.set(f"{SPOOL_REPORT_PREFIX}{producer}", depth, ex=SPOOL_REPORT_TTL)

    def depth(self, kind: str, key: str) -> int:
        """Messages waiting on the shard queue of ``key`` (a passive declare)."""
        try:
            router = self.current_router(kind)
        except Resharding as r:  # still on the old layout's queues
            router = ShardRouter(r.prefix, r.old)
        queue = router.queue(key)
        with self._connections.acquire(block=True) as connection:
            try:
                ok = connection.default_channel.queue_declare(queue=queue, passive=True)
            except ChannelError:  # Redis: an empty queue does not exist
                return 0
            return int(ok.message_count)

    def _router(self, kind: str, record: bytes | str | None) -> ShardRouter:
        """The router of ``kind`` by the shard layout record in Redis (see
        :mod:`tulip_wire.shardlayout`), else by this producer's setting."""
        mine = self._routers[kind]
        layout = ShardLayout.parse(record, key=layout_key(mine.prefix))
        if layout is None:
            return mine
        shards = layout.route(mine.prefix)
        return mine if shards == mine.shards else ShardRouter(mine.prefix, shards)

    def current_router(self, kind: str) -> ShardRouter:
        """The router of ``kind`` now (one round trip); :class:`Resharding` while a
        reshard drains."""
        return self._router(kind, self._redis.get(layout_key(self._routers[kind].prefix)))

    def send(self, env: Envelope, text: str, router: ShardRouter) -> None:
        """Send ``text`` (the encoded ``env``) as a Celery task message on its shard queue."""
        queue = self._queue(router.queue(env.key))
        with self._connections.acquire(block=True) as connection:
            send_event(
                self._app, connection, ALL_TASKS[env.type], event_id=env.id, kind=env.type,
                seq=env.seq, text=text, queue=queue, who=who(env.key), **self._options,
            )  # fmt: skip

    def _queue(self, name: str) -> Queue:
        """The declared queue ``name``: a shard of this producer's setting, or of a
        layout a reshard switched to (declared on first use, like the others)."""
        queue = self._queues.get(name)
        if queue is None:
            from tulip_wire.celeryconfig import kombu_queue

            queue = kombu_queue(name, ordered=True, amqp=self._amqp)
            self._queues = {**self._queues, name: queue}
        return queue

    def _outgoing(self, encoded: Encoded) -> Encoded:
        """The event as it goes out: as it is, or, when its number and signature could
        make it too large, with its payload by reference."""
        if len(encoded.text.encode("utf-8")) <= self._max_unnumbered:
            return encoded
        env = encoded.env
        payload = json.dumps(env.payload, ensure_ascii=False, allow_nan=False)
        return Encoded.of(env.with_ref(self._claim(env.id, payload.encode("utf-8"))))

    def _claim(self, event_id: str, data: bytes) -> PayloadRef:
        """Put ``data`` as the claim check of ``event_id``, once: the spool's retries of
        one event (while a reshard drains, say) reuse the object the first one put."""
        last = self._last_claim
        if (
            last is not None
            and last[0] == event_id
            and last[1].size == len(data)
            and last[1].sha256 == hashlib.sha256(data).hexdigest()
        ):
            return last[1]
        ref = self._claims.put(event_id, data)
        self._last_claim = (event_id, ref)
        return ref

    def put_pending(self, pending: _Pending) -> None:
        """The read-your-writes overlay alone (the event goes to the spool); with Redis
        down the event still goes to the spool, only the overlay is missing until the
        worker writes the state."""
        try:
            self._pending.append(
                pending.tenant, pending.thread_id, pending.entry, self._pending_ttl
            )
        except redis.RedisError as e:
            log.warning(
                "pending state of a checkpoint not stored (%s): read-your-writes "
                "for this thread waits for the worker",
                type(e).__name__,
            )

    def close(self) -> None:
        self._connections.force_close_all()
        self._redis.close()


class SavedCheckpoint(str):
    """A published save: the checkpoint's id (this string: the seeds' checkpointer API
    returns it) carrying the id of the event that publishes it (:attr:`event_id`, the
    one Flower, the logs and ``Reader.status`` know)."""

    event_id: str

    def __new__(cls, checkpoint_id: str, event_id: str) -> SavedCheckpoint:
        saved = super().__new__(cls, checkpoint_id)
        saved.event_id = event_id
        return saved

    @property
    def checkpoint_id(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"SavedCheckpoint({str(self)!r}, event_id={self.event_id!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (SavedCheckpoint, (str(self), self.event_id))


@dataclass(frozen=True)
class _Pending:
    """A save's entry for its thread's pending list (:func:`tulip_wire.pending.entry_text`)."""

    tenant: str
    thread_id: str
    entry: str


def direct_possible(settings: ProducerSettings, app: Celery) -> bool:
    """Whether :mod:`tulip_producer.direct` can publish: a Redis broker that is also
    the sequence-number Redis (one database, keys unprefixed), nothing signed."""
    options = app.conf.broker_transport_options or {}
    return (
        settings.direct_publish
        and settings.signing_key is None
        and settings.redis_url == settings.broker_url
        and scheme_of(settings.broker_url) in {"redis", "rediss", "unix"}
        and not options.get("global_keyprefix")
    )


def _redis_queue(name: str) -> Queue:
    """A shard queue as a Redis broker declares it (the direct path's templates)."""
    from tulip_wire.celeryconfig import kombu_queue

    return kombu_queue(name, ordered=True, amqp=False)


def _redis_client(settings: ProducerSettings) -> redis.Redis:
    """Redis for sequence numbers: bounded like the broker, and no retry of its own."""
    t = settings.publish_timeout
    return redis_client(
        settings.redis_url,
        socket_timeout=t,
        socket_connect_timeout=t,
        retry=Retry(NoBackoff(), 0),
    )


# --- concurrency helpers ----------------------------------------------------------


class _KeyLocks:
    """Striped locks: a key always gets the same lock; different keys rarely share one."""

    def __init__(self, stripes: int = KEY_LOCK_STRIPES) -> None:
        self._locks = [threading.Lock() for _ in range(stripes)]

    def __call__(self, key: str) -> threading.Lock:
        return self._locks[stable_hash(key) % len(self._locks)]


class _Once:
    """Which names were told about already: :meth:`first` is True once per name until
    :meth:`forget` (so a problem is logged once, not once per publish)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._told: set[str] = set()

    def first(self, name: str) -> bool:
        with self._lock:
            new = name not in self._told
            self._told.add(name)
            return new

    def forget(self) -> None:
        with self._lock:
            self._told.clear()


class _Gate:
    """Counts calls in progress, so closing can wait for them before releasing anything."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = 0
        self.closed = False

    @contextmanager
    def entered(self) -> Iterator[None]:
        with self._cond:
            if self.closed:
                raise ProducerClosed("the producer is closed")
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    def shut(self, timeout: float) -> bool:
        """Refuse new calls; True once the running ones finished (within ``timeout``)."""
        with self._cond:
            self.closed = True
            return self._cond.wait_for(lambda: self._busy == 0, timeout)


class _Flusher:
    """The background thread that drains the spool, backing off while delivery fails."""

    def __init__(self, drain: Callable[[], bool], report: Callable[[], None]) -> None:
        self._drain = drain
        self._report = report
        self._reported = 0.0
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tulip-spool-flusher", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float) -> None:
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout)

    def _drain_logged(self) -> bool:
        try:
            return self._drain()
        except Exception:  # e.g. the spool's disk failing: keep the thread alive, say why
            log.exception("draining the spool failed")
            return False

    def _report_now_and_then(self) -> None:
        if time.monotonic() - self._reported < SPOOL_REPORT_EVERY:
            return
        self._reported = time.monotonic()
        try:
            self._report()
        except Exception as e:  # Redis away too: the report comes back with it
            log.debug("spool depth not reported (%s)", type(e).__name__)

    def _run(self) -> None:
        delay = RETRY_MIN_DELAY
        while not self._stopping.is_set():  # first pass at once: a previous run may have left rows
            self._report_now_and_then()
            if self._drain_logged():
                delay = RETRY_MIN_DELAY
                self._wake.wait(IDLE_POLL)
                self._wake.clear()
            else:  # new rows do not shorten the backoff: only stopping does
                self._stopping.wait(delay)
                delay = min(2 * delay, RETRY_MAX_DELAY)


# --- the producer -----------------------------------------------------------------


class Producer:
    """Publishes memory events for a chat backend; thread-safe; see the module docstring."""

    def __init__(
        self,
        settings: ProducerSettings,
        *,
        claims: ClaimCheckStore | None = None,
        bases: PublishedBases | None = None,
    ) -> None:
        self.settings = settings
        #: The last state published per thread, which the next save's delta builds on.
        self.bases = bases if bases is not None else PublishedBases()
        claims = claims or ClaimCheckStore.from_url(
            settings.claim_check_url, endpoint_url=settings.s3_endpoint_url
        )
        self._publisher = _Publisher(settings, claims)  # connects lazily
        self._spool = Spool(settings.spool_dir)
        self._key_locks = _KeyLocks()
        self._gate = _Gate()
        self._close_lock = threading.Lock()
        self._degraded = False
        self._malformed = _Once()  # layout records told about, until delivery works again
        self._left_spooled: int | None = None
        self._name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._flusher = _Flusher(self._drain, self._report_spool)

    @classmethod
    def from_env(cls) -> Self:
        return cls(ProducerSettings.from_env())

    @classmethod
    def from_urls(cls, broker_url: str, redis_url: str = "", **options: Any) -> Self:
        """A producer on explicit URLs; ``options`` are other :class:`ProducerSettings` fields."""
        return cls(ProducerSettings(broker_url=broker_url, redis_url=redis_url, **options))

    @property
    def spooled(self) -> int:
        """How many events wait in the spool for the broker; after :meth:`close`, how
        many it left there for the next producer on the directory."""
        if self._left_spooled is not None:
            return self._left_spooled
        return len(self._spool)

    def session_ended(
        self,
        namespace: tuple[str, ...],
        thread_id: str,
        messages: Sequence[Message] | Sequence[Mapping[str, Any]],
        metadata: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> str:
        """Publish a ``session.ended`` event (or spool it); returns its event id.

        With ``idempotency_key`` (any string naming this session for you: a request id,
        ``"<thread>/<session number>"``) the event id is derived from it, the namespace
        and the thread, so publishing the same session again is the same event: the
        workers' ledger applies it once and ``Reader.status`` of either call's id is the
        one outcome. Without it every call is a new event.

        Bad input raises (``TypeError``/``ValueError``/:class:`EventError`) before
        anything is published or spooled.
        """
        env = events.session_envelope(
            namespace, thread_id, _message_list(messages), metadata, ts=time.time()
        )
        if idempotency_key is not None:
            env = replace(env, id=events.idempotent_id(env.key, thread_id, idempotency_key))
        return self.publish_session(env)  # validates it, once

    def publish_session(self, env: Envelope) -> str:
        """Publish (or spool) a ``session.ended`` event built by the caller, for one
        that chooses the event's id: a backfill whose ids derive from the history, so
        importing it again is the same events (the workers' ledger applies them once)."""
        if env.type != SESSION_ENDED:
            raise EventError(f"publish_session takes session.ended events, got {env.type}", env.id)
        encoded = Encoded.of(env)  # proves the event valid, and is what goes out
        with self._gate.entered(), self._key_locks(env.key):
            if self._spool or not self._try_publish(encoded.env, encoded=encoded):
                self._spool.append(encoded.text)
                self._flusher.wake()
        return env.id

    # -- erasing ------------------------------------------------------------------

    def forget(self, namespace: tuple[str, ...]) -> str:
        """Erase every memory and turn of ``namespace`` (and its dead letters, claim
        checks, ledger keys and sequence counter), in order with its events: what was
        published for it before is applied and then erased, or never applied; what is
        published after is applied. Returns the erase's event id: ``Reader.status`` of
        it is ``applied`` once every store is erased, with the counts
        (``docs/forget.md``)."""
        ns = validate_namespace(namespace)
        env = events.memory_forget(scopes.NAMESPACE, ns[0], ns, ts=time.time())
        return self._publish_erase(env)

    def forget_messages(self, namespace: tuple[str, ...], message_ids: Sequence[str]) -> str:
        """Erase the memories of ``namespace`` whose ``source_ids`` name any of
        ``message_ids``, and the turns holding those messages (and the namespace's
        dead letters quoting them); ordered like :meth:`forget`."""
        if isinstance(message_ids, str):
            raise TypeError("message_ids must be a list of ids, not one string")
        ns = validate_namespace(namespace)
        env = events.memory_forget(
            scopes.MESSAGES, ns[0], ns, list(message_ids),
            ts=time.time(),
        )  # fmt: skip
        return self._publish_erase(env)

    def forget_thread(self, thread_id: str, *, tenant: str) -> str:
        """Erase ``tenant``'s thread: its checkpoints (head, history, name), summary,
        pending saves and summary marker, in order with the thread's saves. This
        producer's next save of the thread carries its whole state."""
        env = events.thread_forget(tenant, thread_id, ts=time.time())
        self.bases.drop(env.key)
        return self._publish_erase(env)

    def forget_tenant(self, tenant: str) -> str:
        """Erase everything of ``tenant``, on every shard: memories, turns, dead
        letters, checkpoints, claim checks, ledger keys, Redis state. Events of the
        tenant published before it are applied and erased, or dropped when delivered
        after it; the tenant's events published after it wait until it is done."""
        env = events.memory_forget(scopes.TENANT, tenant, ts=time.time())
        self.bases.drop_prefix(tenant + NS_SEP)
        return self._publish_erase(env)

    def _publish_erase(self, env: Envelope) -> str:
        """Publish (or spool) an erase: never refused by the tenant's publish quota."""
        encoded = Encoded.of(env)
        with self._gate.entered(), self._key_locks(env.key):
            if self._spool or not self._try_publish(encoded.env, encoded=encoded, quota=False):
                self._spool_text(encoded.text)
        return env.id

    def backlog(self, namespace: tuple[str, ...]) -> int:
        """How many events wait on the shard queue ``namespace``'s events go to (a
        backfill paces itself by it); raises when the broker cannot be reached."""
        with self._gate.entered():
            return self._publisher.depth(SESSION_ENDED, namespace_key(namespace))

    def checkpoint_saved(
        self, thread_id: str, state: AgentState | Mapping[str, Any], *, tenant: str
    ) -> SavedCheckpoint:
        """Publish ``tenant``'s thread's new state (or spool it); returns its checkpoint
        id, a :class:`SavedCheckpoint` whose ``event_id`` is the id of the event carrying
        it (``Reader.status(saved.event_id, tenant=...)`` says when a worker wrote it).

        Thread state is keyed by (tenant, thread id): the same thread id in another
        tenant is another thread. The event carries what changed since the last state
        this producer published for the thread (:attr:`bases`; a tail of appended
        messages, else a patch) with that checkpoint's id and the digest of the new
        state, or the whole state when there is no known base or the change would not
        be smaller. The save is appended to the thread's pending list in Redis in the
        round trip that sequences it, so ``Reader.load(thread_id, tenant=tenant)``
        returns it before any worker has written it (read your writes). A state that is
        not JSON-serializable, or a tenant that is not a namespace part, is refused
        before anything happens.
        """
        checkpoint_id = uuid.uuid4().hex
        key = thread_key(tenant, thread_id)  # refuses a bad tenant first
        with self._gate.entered(), self._key_locks(key):
            known = self.bases.get(key)
            messages = known.known if known is not None else None
            data, count = _checkpoint_data(state, checkpoint_id, messages)
            # The new messages only (the known ones were checked when they were saved).
            new = (count or {}).get(MESSAGES, 0)
            events.check_messages(data.get(MESSAGES), "state.messages", checkpoint_id, start=new)
            try:
                step = advance(known.snapshot if known is not None else None, data, count)
            except NotJSON as e:
                raise EventError(str(e), checkpoint_id) from e
            now = time.time()
            digest = step.snapshot.digest
            if known is not None and step.patch is not None:
                env = events.checkpoint_delta(
                    tenant, thread_id, checkpoint_id, base=known.checkpoint_id,
                    patch=step.patch, digest=digest, ts=now,
                )  # fmt: skip
                body = json.dumps(
                    step.patch, ensure_ascii=False, allow_nan=False, separators=(",", ":")
                )
                base: str | None = known.checkpoint_id
            else:
                env = events.checkpoint_saved(
                    tenant, thread_id, checkpoint_id, data, ts=now, exact=True
                )
                body = canonical(step.snapshot.raw).decode("utf-8", "surrogatepass")
                base = None
            signer = self._publisher.signer
            entry = sealed(signer, tenant, thread_id, checkpoint_id, base, digest, body)
            text = encode(env)
            pending = _Pending(tenant, thread_id, entry)
            if self._spool:
                self._publisher.put_pending(pending)
                self._spool_text(text)
            elif not self._try_publish(env, pending):
                self._spool_text(text)
            self.bases.put(
                key,
                checkpoint_id,
                step.snapshot,
                known_after(state, messages, count, step.snapshot.values.get(MESSAGES)),
            )
        return SavedCheckpoint(checkpoint_id, env.id)

    def _spool_text(self, text: str) -> None:
        self._spool.append(text)
        self._flusher.wake()

    def republish(self, encoded: str) -> None:
        """Publish an event again exactly as it was, sequence number included.

        For dead-letter replays: the workers' sequence fencing keeps a late replay from
        rolling back newer rows. Not spooled: a failure raises :class:`PublishError`,
        so the operator's replay can keep the dead letter.
        """
        env = decode(encoded)
        if env.seq is None:
            raise EventError("only a published event (one with a seq) can be republished", env.id)
        with self._gate.entered():
            try:
                self._publisher.send(
                    env, encoded, self._publisher.current_router(ROLE_OF[env.type])
                )
            except Exception as e:
                raise PublishError(env.id, type(e).__name__) from e

    def flush(self, timeout: float | None = None) -> bool:
        """Deliver spooled events; True once the spool is empty, False on timeout."""
        with self._gate.entered():
            return self._flush_until(_deadline(timeout))

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> None:
        """Stop the flusher, try one last bounded flush, release connections. Idempotent.

        Events still spooled stay on disk (a warning says how many; :attr:`spooled`
        still answers); the next producer on this spool directory delivers them.
        """
        with self._close_lock:
            if self._gate.closed:
                return
            deadline = _deadline(timeout)
            self._gate.shut(_left(deadline) or 0.0)
            self._flusher.stop(_left(deadline) or 0.0)
            self._drain(deadline)
            self._publisher.close()
            left = len(self._spool)
            if left:
                log.warning(
                    "closing with %d event(s) still spooled in %s (the broker did not take "
                    "them in time); the next producer on this spool directory delivers them",
                    left,
                    self.settings.spool_dir,
                )
            self._left_spooled = left
            self._spool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _try_publish(
        self,
        env: Envelope,
        pending: _Pending | None = None,
        encoded: Encoded | None = None,
        *,
        quota: bool = True,
    ) -> bool:
        # Any failure to hand the event over must not lose it: the caller spools it and
        # the flusher retries. The error is logged, not raised, on the request path;
        # a refusal at the door (the tenant's quota) is the caller's, and raises.
        try:
            self._publisher.publish(env, pending, encoded, quota=quota)
        except QuotaExceeded:
            raise
        except Exception as e:
            self._on_failure(env, e)
            return False
        return True

    def _flush_until(self, deadline: float | None) -> bool:
        delay = RETRY_MIN_DELAY
        while not self._drain(deadline):
            left = _left(deadline)
            if (left is not None and left <= 0) or self._gate.closed:
                return False
            time.sleep(delay if left is None else min(delay, left))
            delay = min(2 * delay, RETRY_MAX_DELAY)
        return True

    def _report_spool(self) -> None:
        self._publisher.report_spool(self._name, len(self._spool))

    def _drain(self, deadline: float | None = None) -> bool:
        """One pass: publish spooled rows in order until empty (True), a failure or the deadline."""
        delivered = 0
        with self._spool.draining() as mine:
            if not mine:
                return False  # another thread or process is draining right now
            while batch := self._spool.peek(FLUSH_BATCH):
                for row in batch:
                    if _expired(deadline) or not self._deliver(row):
                        return False
                    delivered += 1
        if delivered:
            self._spool.scrub()
            self._degraded = False
            self._malformed.forget()
            log.info("delivered %d spooled events; the spool is empty", delivered)
        return True

    def _deliver(self, row: SpooledEvent) -> bool:
        try:
            env = decode(row.envelope)
        except EventError as e:  # only a schema change or a damaged file can cause this
            self._spool.reject(row.id, e.reason)
            log.error(
                "spooled row %d no longer decodes (%s): moved to the spool's rejected rows",
                row.id,
                type(e).__name__,
            )
            return True
        if not self._try_publish(env, quota=False):
            return False
        self._spool.remove(row.id)
        return True

    def _on_failure(self, env: Envelope, error: Exception) -> None:
        # The event id and the error's class only: an error's text may quote the
        # envelope (the user's messages) or a connection string.
        if isinstance(error, Resharding):
            log.debug("event %s waits in the spool: %s", env.id, error)
            return
        if isinstance(error, MalformedLayout):
            if self._malformed.first(error.key or ""):
                log.error(
                    "%s: events of its role wait in the spool until it is repaired; run "
                    "`tulip-memory reshard --repair` (it rewrites the record from the "
                    "configured shard count once no queue of the role holds a message)",
                    error,
                )
            else:
                log.debug("event %s waits in the spool: %s", env.id, error)
            return
        if not self._degraded:
            self._degraded = True
            log.warning(
                "cannot publish event %s to the broker at %s (TULIP_BROKER_URL) or its "
                "Redis (%s); spooling events until it is back (a stopped dev stack? its "
                "tulip.env is gone once it stops)",
                env.id,
                redact_url(self.settings.broker_url),
                type(error).__name__,
            )
        else:
            log.debug("publish of %s failed again (%s)", env.id, type(error).__name__)


class AsyncProducer:
    """:class:`Producer` for asyncio: the same calls as coroutines, run in worker threads.

    Calls for one key pass through an asyncio lock first, so they reach the producer
    in the order they were made, even when gathered. Use one event loop per instance.
    """

    def __init__(
        self, settings: ProducerSettings, *, claims: ClaimCheckStore | None = None
    ) -> None:
        self.sync = Producer(settings, claims=claims)
        self._key_locks = [asyncio.Lock() for _ in range(KEY_LOCK_STRIPES)]

    @classmethod
    def from_env(cls) -> Self:
        return cls(ProducerSettings.from_env())

    @classmethod
    def from_urls(cls, broker_url: str, redis_url: str = "", **options: Any) -> Self:
        return cls(ProducerSettings(broker_url=broker_url, redis_url=redis_url, **options))

    @property
    def spooled(self) -> int:
        return self.sync.spooled

    async def session_ended(
        self,
        namespace: tuple[str, ...],
        thread_id: str,
        messages: Sequence[Message] | Sequence[Mapping[str, Any]],
        metadata: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> str:
        lock = self._key_locks[stable_hash(namespace_key(namespace)) % KEY_LOCK_STRIPES]
        async with lock:
            return await asyncio.to_thread(
                partial(self.sync.session_ended, idempotency_key=idempotency_key),
                namespace,
                thread_id,
                messages,
                metadata,
            )

    # ``timeout`` as in Producer: a bound the worker thread honours and reports
    # (False), not a cancellation, which would leave the thread running.
    async def checkpoint_saved(
        self, thread_id: str, state: AgentState | Mapping[str, Any], *, tenant: str
    ) -> SavedCheckpoint:
        lock = self._key_locks[stable_hash(thread_key(tenant, thread_id)) % KEY_LOCK_STRIPES]
        async with lock:
            return await asyncio.to_thread(
                self.sync.checkpoint_saved, thread_id, state, tenant=tenant
            )

    async def forget(self, namespace: tuple[str, ...]) -> str:
        return await self._keyed(namespace_key(namespace), self.sync.forget, namespace)

    async def forget_messages(self, namespace: tuple[str, ...], message_ids: Sequence[str]) -> str:
        key = namespace_key(namespace)
        return await self._keyed(key, self.sync.forget_messages, namespace, message_ids)

    async def forget_thread(self, thread_id: str, *, tenant: str) -> str:
        key = thread_key(tenant, thread_id)
        return await self._keyed(
            key, functools.partial(self.sync.forget_thread, tenant=tenant), thread_id
        )

    async def forget_tenant(self, tenant: str) -> str:
        return await self._keyed(namespace_key((tenant,)), self.sync.forget_tenant, tenant)

    async def _keyed(self, key: str, call: Callable[..., str], *args: Any) -> str:
        """``call(*args)`` in a worker thread, after the calls of ``key`` made before it."""
        async with self._key_locks[stable_hash(key) % KEY_LOCK_STRIPES]:
            return await asyncio.to_thread(call, *args)

    async def flush(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        return await asyncio.to_thread(self.sync.flush, timeout)

    async def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> None:  # noqa: ASYNC109
        await asyncio.to_thread(self.sync.close, timeout)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def _checkpoint_data(
    state: AgentState | Mapping[str, Any], event_id: str, known: Known | None
) -> tuple[dict[str, Any], dict[str, int] | None]:
    """The state as the checkpoint store keeps it: ``AgentState.to_checkpoint()``,
    the published items standing for the messages ``known`` from the last save (and
    how many, for :func:`~tulip_wire.statedelta.advance`); a mapping is read as an
    agent state first (so a delta's base is the stored form)."""
    if isinstance(state, AgentState):
        return checkpoint_data(state, known)
    try:
        return AgentState.from_checkpoint(dict(state)).to_checkpoint(), None
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise EventError(f"payload.state is not an agent state: {e}", event_id) from e


def _message_list(messages: Any) -> list[Any]:
    """The messages as a list, with a clear error for anything that is not one."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a list of messages, got {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not isinstance(m, Message | Mapping):
            raise TypeError(f"messages[{i}] must be a Message or a dict, got {type(m).__name__}")
    return [m if isinstance(m, Message) else dict(m) for m in messages]


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _expired(deadline: float | None) -> bool:
    left = _left(deadline)
    return left is not None and left <= 0

"""Per-key parking: a key's backlog waits, in order, outside a shard worker's reservation.

A shard worker reserves at most ``4·C`` messages (:mod:`tulip_workers.keyed`). Were they
all one key's (a bot, a retry loop, a batch import), it would stop reserving, and every
other key on the shard would wait behind that key's whole backlog, one model call at a
time. So the consumer lets at most ``TULIP_KEY_RESERVATION`` (R, default 2) messages of
one key into its reservation; a later one is *parked*: moved, in one atomic step, from
the queue's delivering list to the tail of the key's parked list
(``tulip:parked:<queue>:<key>``, ``lua/park.lua``), never handed to Celery. Each time a
task of the key finishes (or the message taken back arrives with room for one more),
the key's oldest parked message goes back to the head of the queue
(``lua/unpark.lua``), its delivery tag recorded as *on its way* (``tulip:unparking:<queue>``)
in the same step, and the consumer lets exactly that message through. So:

- other keys keep flowing whatever one key's backlog is: the reservation holds R of it;
- a key's messages reach Celery in queue order: a message of a key that has parked
  messages, or one on its way back, is parked behind them (it is newer);
- nothing is lost or reordered by a SIGKILL at any point of the moves, because each
  move is one script and every list survives the worker:

  * a message on the delivering list when the worker dies goes back to the head of
    the queue (:mod:`tulip_workers.redelivery`) and is parked again (it is newer than
    the key's parked messages), unless it is the one on its way back;
  * the one on its way back, on the queue or the delivering list, is recognised by its
    tag after a restart too; its record goes in the step that records it as unacked
    (``lua/unacked_from_delivering.lua``);
  * unacked messages go back to the head of the queue marked redelivered, and a
    redelivered message is never parked: it is older than every parked message of its
    key (parking starts only once a key holds its R). A restarted worker takes back
    nothing from parking until it has consumed as many messages as the restore put
    back, so no parked message can overtake an older one of its key;
  * parked lists and records are never expired: they hold messages, drained as their
    key's events finish, and an empty list is gone (Redis deletes it).

Only a lone ordered queue on Redis (one consumer, ``acks_late``) is consumed this way
(:mod:`tulip_workers.reliable_redis`). RabbitMQ keeps its own consume: there a key's
backlog beyond the buffer still holds other keys back (see ``docs/fairness.md``).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from tulip_wire.events import CHECKPOINT_SAVED, SESSION_ENDED, TASKS, tenant_of_key
from tulip_wire.scripts import lua
from tulip_wire.topology import (
    CHECKPOINT_QUEUE_PREFIX,
    EXTRACT_QUEUE_PREFIX,
    parked_index_key,
    parked_key,
    unparking_key,
)
from tulip_workers import fencing, reliable_redis
from tulip_workers.keyed import BUFFER_PER_SLOT, MAX_KEY_PARSE_BYTES, envelope_key
from tulip_workers.reliable_redis import Unparked, delivering_key

log = logging.getLogger(__name__)

#: How often the thread that takes messages back looks again without being asked
#: (a failed move is retried then, and a key whose release it missed is noticed).
SWEEP_SECONDS = 1.0
_PARK = lua(__file__, "park.lua")
_UNPARK = lua(__file__, "unpark.lua")
#: The event type of each kind of shard queue, and its task's name.
_EVENT_OF_QUEUE = {
    f"{EXTRACT_QUEUE_PREFIX}.": SESSION_ENDED,
    f"{CHECKPOINT_QUEUE_PREFIX}.": CHECKPOINT_SAVED,
}

#: Messages of ``(event type, ordering key or tenant)`` this process holds (admitted,
#: unfinished).
Held = Callable[[str, str], int]


@dataclass(frozen=True)
class Holdings:
    """What this process holds of each event type: per key, per tenant, and the
    reservation (messages) its worker takes at most."""

    of_key: Held
    of_tenant: Held
    buffer: Callable[[str], int]


@dataclass(frozen=True)
class Arriving:
    """What a message taken off a shard queue says about its parking: its ordering key,
    delivery tag, and whether it was put back by a restore (``redelivered``)."""

    key: str
    tag: str
    redelivered: bool


def arriving(payload: Any, task: str) -> Arriving | None:
    """The parking facts of a kombu message of ``task``, or ``None`` (not one: it is
    delivered as it is, for Celery or the refusals to deal with)."""
    try:
        headers, properties = payload["headers"], payload["properties"]
        tag = properties["delivery_tag"]
        if headers.get("task") != task or not isinstance(tag, str):
            return None
        body = payload["body"]
        if len(body) > MAX_KEY_PARSE_BYTES * 2:
            return None
        if properties.get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        key = envelope_key(args[0], "")
    except Exception:
        return None
    if not key:
        return None
    return Arriving(key, tag, bool(headers.get("redelivered")))


class QueueParking:
    """The parked keys of one shard queue, as its one consumer (this process) keeps them.

    ``arrive`` runs on the consumer thread for every message; a thread of its own takes
    messages back (``released`` asks it to); both hold one lock around each Redis step,
    so the consumer never sees a message on its way back before it is known as such.

    A message is parked when its key holds ``reserve`` messages already, or its tenant
    ``tenant_reserve`` (so one tenant's many keys cannot fill the reservation either),
    or its key has parked messages or one on its way back (they are older). A key's
    messages come back one at a time when the key and its tenant have room, a tenant's
    parked keys in turn.
    """

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        queue: str,
        *,
        reserve: int,
        tenant_reserve: int,
        held: Callable[[str], int],
        tenant_held: Callable[[str], int],
        settle: int = 0,
    ) -> None:
        self.queue = queue
        self.reserve = reserve
        self.tenant_reserve = max(reserve, tenant_reserve)
        self._client = client
        self._prefix = prefix
        self._held = held
        self._tenant_held = tenant_held
        self._delivering = delivering_key(prefix, queue)
        self._index = prefix + parked_index_key(queue)
        self._record = prefix + unparking_key(queue)
        self._queue_list = prefix + queue
        self._park = client.register_script(_PARK)
        self._unpark = client.register_script(_UNPARK)
        self._park_fenced = client.register_script(fencing.guarded(_PARK))
        self._unpark_fenced = client.register_script(fencing.guarded(_UNPARK))
        self._lock = threading.Lock()
        self._asked = threading.Condition(self._lock)
        #: Messages parked per key, and the tag of each key's message on its way back.
        self.parked: dict[str, int] = {}
        self.coming: dict[str, str] = {}
        #: Each tenant's parked keys, in the order they get their turn, and its keys
        #: with a message on its way back.
        self._by_tenant: dict[str, dict[str, None]] = {}
        self._coming_of: Counter[str] = Counter()
        for k, n in client.hgetall(self._index).items():
            self._parked_locked(_text(k), int(n))
        for k, t in client.hgetall(self._record).items():
            self._coming_locked(_text(k), _text(t))
        self._wanted: set[str] = set()
        #: Nothing is taken back before the messages put back at the head of the queue
        #: before this process consumed are consumed: the ``settle`` our restore put
        #: back, then any more marked redelivered (kombu's own, at a warm shutdown),
        #: until a message not so marked arrives or the queue is empty.
        self._settle = settle
        self._settled = False
        self.parks = self.unparks = 0
        threading.Thread(target=self._run, name=f"tulip-unpark-{queue}", daemon=True).start()

    def arrive(self, item: bytes, payload: Any, task: str) -> Unparked | bool:
        """On the consumer thread, before Celery sees the message: ``True`` when it was
        parked (not to be delivered); an :class:`Unparked` when it is the key's message
        on its way back (deliver it, and clear its record with the unacked write);
        ``False``: deliver it as it is."""
        try:
            return self._arrive(item, arriving(payload, task))
        except (redis.ConnectionError, redis.TimeoutError):
            raise  # the consumer puts the message back at the head of its queue
        except Exception:  # a fault of ours never stops the shard: deliver it unparked
            log.exception("could not decide whether to park a message of %s", self.queue)
            return False

    def _arrive(self, item: bytes, facts: Arriving | None) -> Unparked | bool:
        with self._lock:
            if self._settle > 0:
                self._settle -= 1
            elif not self._settled and (facts is None or not facts.redelivered):
                self._settled = True
                self._asked.notify()
            if facts is None:
                return False
            key = facts.key
            coming = self.coming.get(key)
            if coming is not None and coming == facts.tag:
                return Unparked(self._record, key, facts.tag)
            if facts.redelivered:
                return False
            if not self.parked.get(key) and coming is None and self._room_locked(key):
                return False
            return self._park_locked(item, key)

    def arrived(self, unparked: Unparked) -> None:
        """The message on its way back was delivered (its record cleared with its
        unacked write): its tenant's keys may take the next ones back when they have
        room."""
        with self._lock:
            if self.coming.get(unparked.key) == unparked.tag:
                self._coming_locked(unparked.key, None)
            self._want_locked(tenant_of_key(unparked.key))

    def released(self, key: str) -> None:
        """A task of ``key`` finished here: take back what its tenant has room for."""
        with self._lock:
            self._want_locked(tenant_of_key(key))

    def _room_locked(self, key: str) -> bool:
        """Whether ``key`` and its tenant may hold one more message."""
        if self._held(key) >= self.reserve:
            return False
        tenant = tenant_of_key(key)
        return self._tenant_held(tenant) + self._coming_of[tenant] < self.tenant_reserve

    def _park_locked(self, item: bytes, key: str) -> bool:
        digest = hashlib.sha1(item, usedforsecurity=False).hexdigest()
        parked = parked_key(self.queue, key)
        keys = [self._delivering, self._prefix + parked, self._index]
        n = int(self._script(self._park, self._park_fenced, keys, [digest, key]))
        if n == 0:  # no longer on the delivering list (put back meanwhile): deliver
            return False
        self._parked_locked(key, n)
        self.parks += 1
        return True

    def _script(self, plain: Any, fenced: Any, keys: list[str], args: list[str]) -> Any:
        """``fenced`` while this process holds the queue's lease (the worker's case),
        ``plain`` without one."""
        if fencing.fence_of(self.queue) is None:
            return plain(keys=keys, args=args)
        return fencing.run(fenced, self.queue, keys, args)

    def _parked_locked(self, key: str, n: int) -> None:
        tenant = tenant_of_key(key)
        if n > 0:
            self.parked[key] = n
            self._by_tenant.setdefault(tenant, {}).setdefault(key, None)
            return
        self.parked.pop(key, None)
        keys = self._by_tenant.get(tenant, {})
        keys.pop(key, None)
        if not keys:
            self._by_tenant.pop(tenant, None)

    def _coming_locked(self, key: str, tag: str | None) -> None:
        tenant = tenant_of_key(key)
        if tag is not None:
            self._coming_of[tenant] += key not in self.coming
            self.coming[key] = tag
        elif self.coming.pop(key, None) is not None:
            self._coming_of[tenant] -= 1
            if self._coming_of[tenant] <= 0:
                del self._coming_of[tenant]

    def _want_locked(self, tenant: str) -> None:
        """Ask for the next messages of ``tenant``'s parked keys, as many as it has
        room for, its keys in turn."""
        room = self.tenant_reserve - self._tenant_held(tenant) - self._coming_of[tenant]
        for key in self._by_tenant.get(tenant, {}):
            if room <= 0:
                break
            if key in self._wanted:
                room -= 1
            elif key not in self.coming and self._held(key) < self.reserve:
                self._wanted.add(key)
                self._asked.notify()
                room -= 1

    def _run(self) -> None:
        while True:
            with self._lock:
                idle = False
                if not self._wanted or not self._settled:
                    idle = not self._asked.wait(SWEEP_SECONDS)
                if not self._settled and not self._settle_when_empty():
                    continue
                if idle:  # what a missed release or a failed move left
                    for tenant in list(self._by_tenant):
                        self._want_locked(tenant)
                wanted, self._wanted = self._wanted, set()
                for key in wanted:
                    self._take_back_locked(key)

    def _settle_when_empty(self) -> bool:
        """Settled once the queue and its delivering list are empty (nothing put back
        is left to consume)."""
        if self._settle > 0:
            return False
        try:
            empty = self._client.llen(self._queue_list) == 0
            empty = empty and self._client.llen(self._delivering) == 0
        except redis.RedisError:
            return False
        self._settled = empty
        return empty

    def _take_back_locked(self, key: str) -> None:
        keys = [self._prefix + parked_key(self.queue, key), self._index, self._record]
        try:
            keys.append(self._queue_list)
            tag, left = self._script(self._unpark, self._unpark_fenced, keys, [key])
        except redis.RedisError as e:
            log.warning("could not take back a parked message of %s (%s)", self.queue, e)
            return  # the next sweep tries again
        self._parked_locked(key, int(left))
        if tag:
            self._coming_locked(key, _text(tag))
            self.unparks += 1
            tenant_keys = self._by_tenant.get(tenant_of_key(key))
            if tenant_keys is not None and key in tenant_keys:  # its turn is over
                del tenant_keys[key]
                tenant_keys[key] = None


class Parking:
    """This process's parking: one :class:`QueueParking` per shard queue it consumes
    alone (made at the worker's start, or on its first message), and the hook the
    consumer calls."""

    def __init__(self, reserve: int | None, holdings: Holdings) -> None:
        self._reserve = reserve
        self._holdings = holdings
        self._queues: dict[str, QueueParking] = {}
        self._lock = threading.Lock()

    @property
    def reserve(self) -> int:
        """Messages of one key in the reservation at most (0: none parked)."""
        if self._reserve is None:
            from tulip_workers.runtime import runtime

            self._reserve = runtime().settings.key_reservation
        return self._reserve

    def start(self, channel: Any, queue: str, restored: int) -> None:
        """Before this process consumes ``queue`` (a worker's start, after its restore
        put ``restored`` messages back at the head): load its parked keys and begin
        taking their messages back, none before those put back."""
        event_type = _event_of(queue)
        if event_type is not None and self.reserve > 0:
            self._of(channel, queue, event_type, restored)

    def arrive(self, channel: Any, queue: str, item: bytes, payload: Any) -> Unparked | bool:
        """:meth:`QueueParking.arrive` for ``queue`` (the consumer's hook)."""
        event_type = _event_of(queue)
        if event_type is None or self.reserve < 1:
            return False
        return self._of(channel, queue, event_type).arrive(item, payload, TASKS[event_type])

    def arrived(self, queue: str, unparked: Unparked) -> None:
        parking = self._queues.get(queue)
        if parking is not None:
            parking.arrived(unparked)

    def released(self, event_type: str, key: str) -> None:
        """A task of ``event_type`` and ``key`` finished in this process."""
        for queue, parking in list(self._queues.items()):
            if _event_of(queue) == event_type:
                parking.released(key)

    def of(self, queue: str) -> QueueParking | None:
        return self._queues.get(queue)

    def _of(self, channel: Any, queue: str, event_type: str, restored: int = 0) -> QueueParking:
        with self._lock:
            parking = self._queues.get(queue)
            if parking is None:
                h = self._holdings
                parking = self._queues[queue] = QueueParking(
                    redis.Redis(connection_pool=channel.pool),
                    channel.global_keyprefix,
                    queue,
                    reserve=self.reserve,
                    tenant_reserve=h.buffer(event_type) // 2,
                    held=functools.partial(h.of_key, event_type),
                    tenant_held=functools.partial(h.of_tenant, event_type),
                    settle=restored,
                )
        return parking


def _event_of(queue: str) -> str | None:
    return next((t for p, t in _EVENT_OF_QUEUE.items() if queue.startswith(p)), None)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "surrogatepass") if isinstance(value, bytes) else value


_parking: Parking | None = None


def install(reserve: int | None = None, holdings: Holdings | None = None) -> Parking:
    """Park for this process's lone shard queues on Redis, ``reserve`` messages of a
    key in the reservation at most (default ``TULIP_KEY_RESERVATION``; ``0``: no
    parking) and half the reservation of one tenant, counting what ``holdings`` says
    this process holds (default: its :class:`~tulip_workers.keyed.KeyOrder`)."""
    global _parking
    _parking = Parking(reserve, holdings or Holdings(_of_key, _of_tenant, _buffer))
    reliable_redis.park_items_with(_parking)
    return _parking


def _of_key(event_type: str, key: str) -> int:
    from tulip_workers.runtime import runtime

    return runtime().order(event_type).held(key)


def _of_tenant(event_type: str, tenant: str) -> int:
    from tulip_workers.runtime import runtime

    return runtime().order(event_type).held_by_tenant(tenant)


def _buffer(event_type: str) -> int:
    from tulip_workers.runtime import runtime

    return BUFFER_PER_SLOT * runtime().order(event_type).slots


def parking() -> Parking | None:
    """This process's parking, once installed."""
    return _parking

"""kombu's Redis transport, with a consume that cannot lose a message to a SIGKILL.

kombu consumes with ``BRPOP``: Redis removes the message from the queue list when it
sends the reply, and the consumer writes it to the ``unacked`` hash only after it has
read and parsed the reply. A worker killed in between (the reply in its socket buffer,
or parsed but not yet recorded) loses the message: no list, no hash holds it any more
(kombu issue #305 and its kin). A shard worker has one queue and one consumer, so this
transport closes the window the way Redis's own "reliable queue" pattern does:

- ``BLMOVE <queue> tulip:delivering:<queue> RIGHT LEFT`` takes the message off the
  queue and puts it on the queue's *delivering* list in one atomic step;
- the unacked-hash write (kombu's ``QoS.append``) takes it off the delivering list in
  the same atomic step (:class:`QoS`, ``lua/unacked_from_delivering.lua``), so at every
  instant the message is in exactly one of: the queue, the delivering list, the unacked
  hash; the script builds the unacked entry from the list's own item, so the message
  crosses the wire once (the ``BLMOVE`` reply), not twice more (kombu's entry and an
  ``LREM`` naming the whole message);
- what a dead consumer leaves on the delivering list goes back to the head of its
  queue, behind that consumer's unacked messages, in the same atomic step as those
  (``lua/restore_unacked.lua``, run by :mod:`tulip_workers.redelivery` at start);
- a live consumer whose reply was lost (a connection error, or kombu's health check
  dropping a connection whose reply is overdue: the message moved, the reply never
  read) puts the delivering list back at the head before it asks again; so does every
  new channel before its first ask, because the consumer that lost the reply may have
  gone on with a new connection (Celery's consumer starts over on a new connection and
  channel after a broker outage: the old channel, which knew of the lost reply, is
  gone). What is on the list then is no running task's (a task is on it only between
  the reply and the unacked write, both on the channel that asked), and a later event
  of a key still running in this process waits behind it (:mod:`tulip_workers.keyed`).

Only ordered shard queues (``memory.extract.*``, ``memory.checkpoint.*``: one consumer
each) are consumed this way, and only with ack emulation on (``acks_late``); any other
consumer keeps kombu's ``BRPOP``. Ordered queues have a single list: a priority would
reorder a namespace, so :data:`PRIORITY_STEPS` is ``[0]`` for every sender too
(``tulip_wire.celeryconfig``). Sentinel-managed brokers get the same consume
(:class:`SentinelTransport`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from functools import cached_property
from queue import Empty
from time import monotonic, time
from typing import Any, NamedTuple, Protocol

import redis
from kombu import transport as kombu_transports
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps, loads
from redis.commands.core import Script

from tulip_wire.scripts import lua
from tulip_wire.topology import DELIVERING_PREFIX, is_ordered_queue
from tulip_workers import fencing

#: The URL schemes whose transport this module replaces in a worker process.
SCHEMES = ("redis", "rediss", "sentinel")

log = logging.getLogger(__name__)
#: Records a delivering list's item as unacked and takes it off the list, by its digest.
_RECORD = lua(__file__, "unacked_from_delivering.lua")
#: A leased queue's consume, ack and put-back (behind the lease's fence).
_CONSUME = fencing.guarded(lua(__file__, "consume.lua"))
_ACK = fencing.guarded(lua(__file__, "ack.lua"))
_RETURN = fencing.guarded(lua(__file__, "return_delivering.lua"))


def delivering_key(global_keyprefix: str, queue: str) -> str:
    """The list holding ``queue``'s message between the pop and the unacked write."""
    return f"{global_keyprefix}{DELIVERING_PREFIX}{queue}"


class NotAMessage(Exception):
    """An item on a queue that kombu cannot read as a message (kombu's Redis transport
    counts a ``KeyError`` as a connection error: this keeps it the item's fault)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(f"not a kombu message: {type(error).__name__}: {error}")
        self.error = error


class Message(virtual.Message):  # type: ignore[misc]
    """kombu's Redis message, whose envelope errors are :class:`NotAMessage` when it
    comes off an ordered queue (:meth:`Channel._deliver_moved`); elsewhere as kombu's."""

    def __init__(self, payload: Any, channel: Any = None, **kwargs: Any) -> None:
        try:
            super().__init__(payload, channel=channel, **kwargs)
        except Exception as e:
            if getattr(channel, "_moved", None) is None:
                raise
            raise NotAMessage(e) from e


class Unparked(NamedTuple):
    """A message taken back from parking (:mod:`tulip_workers.parking`): its record
    (hash key), ordering key and delivery tag; the unacked write clears the record."""

    record: str
    key: str
    tag: str


class QoS(kombu_redis.QoS):  # type: ignore[misc]
    """kombu's QoS, whose unacked write also takes the message off the delivering list
    (the entry is kombu's ``[payload, exchange, routing_key]``, the payload the very
    bytes the consumer received)."""

    def append(self, message: Any, delivery_tag: str) -> None:
        moved = self.channel._take_moved()
        if moved is None:
            super().append(message, delivery_tag)
            return
        key, item = moved
        delivery = message.delivery_info
        tail = dumps([delivery["exchange"], delivery["routing_key"]])[1:]  # ,"ex","rk"]
        prefix = self.channel.global_keyprefix
        keys = [key, prefix + self.unacked_key, prefix + self.unacked_index_key]
        digest = hashlib.sha1(item, usedforsecurity=False).hexdigest()
        args = [delivery_tag, time(), digest, "," + tail]
        if (unparked := self.channel._unparked) is not None:
            keys.append(unparked.record)
            args += [unparked.key, unparked.tag]
        queue = self.channel._leased()
        if queue is not None:
            recorded = fencing.run(self.channel.fenced_scripts[0], queue, keys, args)
        else:
            recorded = self.channel.record_unacked(keys=keys, args=args)
        if not recorded:  # no longer on the list (put back meanwhile): kombu's own write
            super().append(message, delivery_tag)
            return
        virtual.QoS.append(self, message, delivery_tag)

    def ack(self, delivery_tag: str) -> None:
        """kombu's ack; on a leased queue only while the lease is this process's."""
        queue = self.channel._leased()
        if queue is None:
            super().ack(delivery_tag)
            return
        prefix = self.channel.global_keyprefix
        keys = [prefix + self.unacked_key, prefix + self.unacked_index_key]
        fencing.run(self.channel.fenced_scripts[1], queue, keys, [delivery_tag])
        virtual.QoS.ack(self, delivery_tag)

    def restore_unacked(self, client: Any = None) -> None:
        """kombu's put-back at a channel's close, but for a leased queue: its lease's
        release puts them back, oldest first (:mod:`tulip_workers.lease`), and a fenced
        process must not put them back at all."""
        if self.channel._leased() is None:
            super().restore_unacked(client)
            return
        self._delivered.clear()


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    """kombu's Redis channel consuming a lone ordered queue with ``BLMOVE``."""

    QoS = QoS
    Message = Message

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._moving: tuple[str, str] | None = None  # (queue, delivering key) asked for
        self._moved: tuple[str, bytes] | None = None  # (delivering key, raw item) read
        self._orphans: str | None = None  # (queue) a reply was lost: put its list back
        self._asked = False  # whether this channel has asked for a message yet
        self._unparked: Unparked | None = None  # the message being delivered, if so
        #: A leased queue: whether to ask for its head (else wait until it has one).
        self._ready = True
        self._consume_sha: str | None = None

    #: (pool, its client): kombu's own __init__ may ask for one before ours runs.
    _pooled: tuple[Any, Any] | None = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        """One client per pool, not one per command: kombu builds one for each ack and
        each event it publishes, and building a redis-py client (its response callbacks
        and option tables) cost more than the command (a fifth of a threaded shard
        worker's consumer thread); a pooled client is thread-safe."""
        if asynchronous:
            return super()._create_client(asynchronous=True)
        pool, pooled = self.pool, self._pooled
        if pooled is None or pooled[0] is not pool:
            pooled = self._pooled = (pool, super()._create_client())
        return pooled[1]

    @cached_property
    def record_unacked(self) -> Script:
        """``lua/unacked_from_delivering.lua`` on a client of the channel's pool that
        sends keys as given (kombu's own client prefixes only a script's first key)."""
        return redis.Redis(connection_pool=self.pool).register_script(_RECORD)

    @cached_property
    def fenced_scripts(self) -> tuple[Script, Script, Script]:
        """The unacked write, the ack and the put-back of a leased queue, fenced."""
        client = redis.Redis(connection_pool=self.pool)
        record = fencing.guarded(_RECORD)
        return tuple(client.register_script(s) for s in (record, _ACK, _RETURN))  # type: ignore[return-value]

    def _leased(self) -> str | None:
        """The lone ordered queue this channel consumes under a lease, if so (also once
        the consumer was cancelled, at a warm shutdown: its acks and put-backs stay
        fenced)."""
        queues = list(self.active_queues)
        if len(queues) == 1:
            queue = str(queues[0])
        elif not queues and self._moving is not None:
            queue = self._moving[0]
        else:
            return None
        return queue if fencing.fence_of(queue) is not None else None

    def _take_moved(self) -> tuple[str, bytes] | None:
        moved, self._moved = self._moved, None
        return moved

    def _lone_ordered_queue(self, queues: list[str]) -> str | None:
        if not self.ack_emulation or len(queues) != 1 or len(self.priority_steps) != 1:
            return None
        return queues[0] if is_ordered_queue(queues[0]) else None

    def _brpop_start(self, timeout: float | None = None) -> None:
        queues = self._queue_cycle.consume(len(self.active_queues))
        queue = self._lone_ordered_queue(list(queues))
        if queue is None:
            self._moving = None
            super()._brpop_start(timeout)
            return
        if self._orphans is not None or not self._asked:
            self._return_orphans(queue)
        self._asked = True
        source = self.global_keyprefix + self._q_for_pri(queue, self.priority_steps[0])
        target = delivering_key(self.global_keyprefix, queue)
        self._moving = (queue, target)
        wait = self.brpop_timeout if timeout is None else timeout
        fence = fencing.fence_of(queue)
        if fence is not None and self._ready and self._consume_sha is None:
            self._consume_sha = self.client.script_load(_CONSUME)
        self._in_poll = self.client.connection
        self._brpop_sent_at = monotonic()
        if fence is None:
            self.client.connection.send_command(
                "BLMOVE", source, target, "RIGHT", "LEFT", wait or 0
            )
        elif self._ready:  # the fenced consume: one script, never blocking
            self.client.connection.send_command(
                "EVALSHA", self._consume_sha, 3, source, target, fence.key, fence.token
            )
        else:  # wait for a head without taking it (a rotation onto the same end)
            self.client.connection.send_command(
                "BLMOVE", source, source, "RIGHT", "RIGHT", wait or 0
            )

    def _on_connection_disconnect(self, connection: Any) -> None:
        """A connection dropped with a ``BLMOVE`` outstanding (kombu's health check
        drops one whose reply is overdue): Redis may have moved a message whose reply
        never arrived, so put the delivering list back before asking again."""
        if self._moving is not None and self._in_poll is connection:
            self._orphans = self._moving[0]
        super()._on_connection_disconnect(connection)

    def _return_orphans(self, queue: str) -> None:
        """Put a lost reply's message back at the head of ``queue``, oldest first."""
        source = delivering_key(self.global_keyprefix, queue)
        target = self.global_keyprefix + self._q_for_pri(queue, self.priority_steps[0])
        if fencing.fence_of(queue) is not None:
            fencing.run(self.fenced_scripts[2], queue, [source, target], [], client=self.client)
        else:
            while self.client.lmove(source, target, "LEFT", "RIGHT") is not None:
                pass
        self._orphans = None

    def _brpop_read(self, **options: Any) -> bool:
        if self._moving is None:
            return bool(super()._brpop_read(**options))
        queue, target = self._moving
        fenced = fencing.fence_of(queue) is not None
        waited = fenced and not self._ready
        try:
            try:
                item = self.client.parse_response(self.client.connection, "BLMOVE", **options)
            except self.connection_errors:
                self._orphans = queue
                self.client.connection.disconnect()
                raise
            except redis.ResponseError as e:
                if not fenced:
                    raise
                self._consumed_fenced(queue, e)
            if fenced:
                self._ready = item is not None
                if waited:  # the queue has a head now (or the wait timed out): ask
                    raise Empty()
            if item is None:
                raise Empty()
            self._queue_cycle.rotate(queue)
            self._deliver_moved(queue, target, item)
            return True
        finally:
            self._in_poll = None
            self._flush_brpop_reauth()

    def _consumed_fenced(self, queue: str, error: redis.ResponseError) -> None:
        """A fenced consume's error reply: the lease lapsed and taken back (ask again),
        or lost (the process ends); or the script gone from a restarted Redis (loaded
        again before the next ask)."""
        if fencing.FENCED_REPLY in str(error):
            fence = fencing.fence_of(queue)
            if fence is None or not fence.regain():
                fencing.lost(queue, "the consume was fenced")
            self._ready = True  # taken back (a lease lapsed in an outage): ask again
            raise Empty() from error
        self._consume_sha = None
        self._ready = True
        raise Empty() from error

    def _deliver_moved(self, queue: str, target: str, item: bytes) -> None:
        """Hand ``item`` to the consumer; if it fails before kombu recorded it as
        unacked: a broker error leaves it to go back to the head of ``queue`` once
        the connection is back, anything else (not a kombu message: bad JSON, a
        missing envelope field) is :meth:`_not_a_message` (kombu's own consume would
        stop the worker)."""
        self._moved = (target, item)
        try:
            try:
                payload = loads(bytes_to_str(item))
            except Exception as e:
                raise NotAMessage(e) from e
            taken = False if _park is None else _park.arrive(self, queue, item, payload)
            if taken is True:  # parked: off the delivering list, not for Celery yet
                return
            self._unparked = taken or None
            self.connection._deliver(payload, queue)
            if self._unparked is not None and _park is not None:
                _park.arrived(queue, self._unparked)
        except NotAMessage as e:
            self._not_a_message(queue, target, item, e.error)
        except self.connection_errors:
            if self._moved is not None:
                self._orphans = queue
            raise
        except Exception as e:
            if self._moved is None:
                raise
            self._not_a_message(queue, target, item, e)
        finally:
            self._moved = None
            self._unparked = None

    def _not_a_message(self, queue: str, target: str, item: bytes, error: Exception) -> None:
        """Drop an item that is no kombu message once :data:`_refuse` filed it (its dead
        letter); one it could not file goes back to the head of ``queue``."""
        if _refuse is not None and not _refuse(queue, item, error):
            self._orphans = queue
            return
        self.client.lrem(target, 1, item)
        log.error(
            "dropped a %d-byte item on %s that is not a kombu message: %s%s",
            len(item),
            queue,
            type(error).__name__,
            "" if _refuse is not None else " (no dead letter: nothing files them)",
        )


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    """kombu's Redis transport with :class:`Channel`."""

    Channel = Channel


class SentinelChannel(kombu_redis.SentinelChannel, Channel):  # type: ignore[misc]
    """kombu's Sentinel-managed channel with :class:`Channel`'s consume."""


class SentinelTransport(kombu_redis.SentinelTransport):  # type: ignore[misc]
    """kombu's Sentinel transport with :class:`SentinelChannel`."""

    Channel = SentinelChannel


#: Files an item on a shard queue that is no kombu message as a dead letter: (queue,
#: item, the error), whether it is filed (:func:`refuse_items_with`).
Refuse = Callable[[str, bytes, Exception], bool]
_refuse: Refuse | None = None


def refuse_items_with(refuse: Refuse | None) -> Refuse | None:
    """Items on a shard queue that are no kombu message go to ``refuse`` in this process
    (``None``: dropped, logged); returns the one before."""
    global _refuse
    before, _refuse = _refuse, refuse
    return before


class Park(Protocol):
    """Decides, on the consumer thread, whether a message of a lone ordered queue waits
    parked (:mod:`tulip_workers.parking`): ``arrive`` returns ``True`` when it parked it
    (off the delivering list), an :class:`Unparked` for a message taken back from
    parking (delivered; ``arrived`` is called after), ``False`` to deliver it."""

    def arrive(self, channel: Any, queue: str, item: bytes, payload: Any) -> Unparked | bool: ...

    def arrived(self, queue: str, unparked: Unparked) -> None: ...


_park: Park | None = None


def park_items_with(park: Park | None) -> Park | None:
    """Messages of lone ordered queues go through ``park`` in this process (``None``:
    none is parked); returns the one before."""
    global _park
    before, _park = _park, park
    return before


def install() -> None:
    """Make these the transports of ``redis://``, ``rediss://`` and ``sentinel://`` URLs
    in this process (a worker's: it changes nothing about how messages are sent)."""
    for scheme in SCHEMES:
        name = "SentinelTransport" if scheme == "sentinel" else "Transport"
        kombu_transports.TRANSPORT_ALIASES[scheme] = f"{__name__}:{name}"
        kombu_transports._transport_cache.pop(scheme, None)

"""A publish in one Redis round trip: sequence number, published marker, layout check
and the enqueue, in one script.

The general path (:meth:`tulip_producer.producer._Publisher.publish`) takes two: a
pipeline that numbers the event, then Celery's ``send_task``. Where the broker and the
sequence-number Redis are one database and nothing is signed, this path publishes the
message ``send_task`` would, built by Celery itself: once per task, :func:`send_event`
(the one call both paths make) sends an event whose fields are markers to kombu's
in-memory transport, and the message it stores, written as kombu's Redis transport writes
it (its body plain JSON rather than base64), becomes a :class:`MessageTemplate`, and
the template becomes part of the task's own script (``tulip_wire/lua/publish_direct.lua``
after a prelude holding the template's text: Redis keeps it in its script cache, so
Celery's ~1 KB of headers and properties are not sent per publish). A publish sends only
the event's own fields (task id, delivery tag, the envelope's one encoding,
:class:`~tulip_wire.events.Encoded`; the queue is the script's key) and the script
numbers the event, marks it published and pushes the message, the number written where
the markers stood, onto the shard queue, as kombu's Redis transport would; a checkpoint
save's pending entry (:mod:`tulip_wire.pending`) is appended by the same script, so the
one round trip also keeps the pending list in the order of the sequence numbers. A small
envelope is sent as it is and the script escapes it into the message (in the message it
is a string inside a string: each quote would cost 7 bytes escaped here, not 1; a
checkpoint save's, see :data:`RAW_ENVELOPE_MAX`), and a
small pending entry's body (a patch's JSON, also in the envelope) is sent once. The
delivery tag is 16 random URL-safe characters (96 bits), not kombu's 36-character uuid:
it crosses the wire four times per event (the publish, the worker's unacked write and
its ack's two commands). When the layout record
(:mod:`tulip_wire.shardlayout`) names another shard count, the script does nothing and
the general path takes over. A template whose rendering of a sample event differs from
what ``send_task`` stores for it (another serializer, compression, a publish signal
adding headers that vary) is not used: the general path publishes everything.

All of a script's keys must live on one Redis node: on a Redis Cluster, this path
needs the keys hash-tagged together, which they are not; use the general path there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import redis
from celery import Celery
from kombu import Connection, Queue
from kombu.utils.json import dumps as kombu_dumps

import tulip_wire
from tulip_producer.quota import PublishQuota
from tulip_producer.settings import ProducerSettings
from tulip_wire.events import CHECKPOINT_SAVED, TASKS, Encoded, tenant_of_key
from tulip_wire.numbering import FUNCTIONS, OVER_QUOTA
from tulip_wire.published import PublishedEvents
from tulip_wire.routing import ShardRouter
from tulip_wire.scripts import lua
from tulip_wire.shardlayout import layout_key
from tulip_wire.topology import quota_key, seq_key

_SCRIPT = lua(tulip_wire.__file__, "publish_direct.lua")
#: The fields of one event in a message; ``env`` is the envelope, ``seq`` its number.
_MARKED = ("id", "queue", "tag", "env", "seq", "who")
#: The holes a publish fills in, in the order it sends them (the number, ``seq``, and
#: the queue, its key, are the script's); the envelope is two holes, ``head`` and
#: ``tail``, around its number; ``who`` (what Flower shows of the event's key, sent
#: after the quota's arguments) is not in ``_SENT``.
_HOLES = ("id", "queue", "tag", "head", "tail", "who")
_SENT = ("id", "tag", "head", "tail")
#: The fields of a message that are the sending process's, where they are: sent per
#: publish (after the holes') rather than written into the script.
_PROCESS = {"origin": ("headers", "origin"), "reply_to": ("properties", "reply_to")}
#: A sample event a template must render exactly as ``send_task`` stores it: an
#: envelope's text with quotes, backslashes, a NUL, accents and an emoji around its number.
_SAMPLE_ID = "0123456789abcdef0123456789abcdef"
_SAMPLE_HEAD = '{"v": 1, "said": "q\\" \\\\ \x00 ü 🌷", "seq": '
_SAMPLE_TAIL = ', "payload": {"said": "\\u0000 \\" \' {}"}}'
_SAMPLE_SEQ = 9_007_199_254_740_991
_SAMPLE_WHO = "a-Tenant_9.x:0123abcd"
#: The characters of a tenant that Flower shows as they are; any other is ``_``.
_SHOWN = re.compile(r"[^A-Za-z0-9._-]")

#: A pending entry up to this long (a patch's, mostly) is sent once: the script copies
#: its body into the message. A longer one (a whole state) is escaped here, faster
#: than the script would (blocking Redis) and sent twice.
SHARED_BODY_MAX = 4096
#: A checkpoint save's envelope up to this long is sent as it is and escaped by the
#: script; a longer one (a whole state) is escaped here, as the long pending entries
#: are. Only checkpoint saves: their bytes are their cost (a delta is a few hundred
#: bytes of JSON, much of it quotes), while a ``session.ended`` envelope's quotes are
#: few among its text and escaping 2-3 KB in Lua cost its publish 20-40 us more of
#: Redis's time (``INFO commandstats``: ``evalsha`` 43-65 us a call before, 86 after).
RAW_ENVELOPE_MAX = 8192

log = logging.getLogger(__name__)
T = TypeVar("T")


def argsrepr(kind: str, event_id: str, seq: object, who: str) -> str:
    """What Flower and task events show of an event's args instead of the conversation:
    its type, tenant and short key (:func:`who`), id and sequence number."""
    return f"[<{kind} {who} {event_id} seq={seq}>]"


def who(key: str) -> str:
    """An event's ordering key as Flower shows it: the tenant (characters other than
    letters, digits, ``.``, ``_`` and ``-`` as ``_``; at most 40) and 8 hex digits of
    a digest of the whole key, which tell a namespace's or thread's events apart and
    find them in the logs without showing its names (``acme:3f9a1c2e``)."""
    tenant = _SHOWN.sub("_", tenant_of_key(key))[:40]
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    return f"{tenant}:{digest}"


def send_event(
    app: Celery,
    connection: Connection,
    task: str,
    *,
    event_id: str,
    kind: str,
    seq: object,
    text: str,
    queue: Queue,
    who: str,
    **options: Any,
) -> None:
    """Send one event as a Celery task message: the producer's only ``send_task`` call,
    so the general path and the direct path's templates send the same message."""
    app.send_task(
        task,
        args=[text],
        task_id=event_id,
        queue=queue,
        routing_key=queue.name,
        # The default exchange delivers by queue name: kombu's Redis transport then
        # skips its per-publish binding lookup (one round trip less).
        exchange="",
        retry=False,
        connection=connection,
        add_to_parent=False,
        argsrepr=argsrepr(kind, event_id, seq, who),
        **options,
    )


class MessageTemplate:
    """One task's message as ``send_task`` stores it on a Redis broker, with holes for
    the fields of an event: literal text and hole names, alternately (its first and
    last item literal text), as :meth:`render` fills them in and as the task's script
    holds them (:meth:`lua`), so a publish sends only the event's own fields."""

    def __init__(self, chunks: list[str], process: Mapping[str, str] | None = None) -> None:
        self._chunks = chunks  # literal, hole, literal, ..., literal; holes: _HOLES
        #: The fields that are this process's (Celery's ``origin``, ``reply_to``), as
        #: they read in the message: holes too, so every producer of one version has
        #: the same scripts (Redis keeps each script loaded until it restarts).
        self.process = dict(process or {})

    @classmethod
    def build(cls, app: Celery, task: str, kind: str, queue: Callable[[str], Queue]) -> Self | None:
        """The template of ``task``, or None (and why, logged) when Celery's message
        cannot be templated. Built in a thread of its own, where no Celery task is
        running, so a producer made inside a task does not make that task the parent
        of every event it publishes."""
        with ThreadPoolExecutor(1, thread_name_prefix="tulip-direct-template") as pool:
            return pool.submit(cls._build, app, task, kind, queue).result()

    @classmethod
    def _build(
        cls, app: Celery, task: str, kind: str, queue: Callable[[str], Queue]
    ) -> Self | None:
        token = f"tulip{uuid.uuid4().hex}"
        m = {name: token + name for name in _MARKED}
        send = _Capture(app, task, kind, queue)
        try:
            marked = send(
                id=m["id"], queue=m["queue"], tag=m["tag"], text=m["env"], seq=m["seq"],
                who=m["who"],
            )  # fmt: skip
            process = {}
            for name, (part, key) in _PROCESS.items():
                value = marked.get(part, {}).get(key)
                if isinstance(value, str):
                    process[name] = json.dumps(value)[1:-1]
                    marked[part][key] = m[name] = token + name
            template = cls(_chunks(kombu_dumps(marked), m), process)
            sample = {"id": _SAMPLE_ID, "queue": f"{token}.0", "tag": delivery_tag()}
            text = f"{_SAMPLE_HEAD}{_SAMPLE_SEQ}{_SAMPLE_TAIL}"
            expected = send(**sample, text=text, seq=str(_SAMPLE_SEQ), who=_SAMPLE_WHO)
            seq = str(_SAMPLE_SEQ)
            got = json.loads(
                template.render(
                    **sample, head=_SAMPLE_HEAD, tail=_SAMPLE_TAIL, seq=seq, who=_SAMPLE_WHO
                )
            )
        except Exception as e:  # a message this module cannot read: say why
            _refused(task, f"{type(e).__name__}: {e}")
            return None
        if got != expected:
            _refused(task, "a sample event's message is not the one send_task stores")
            return None
        return template

    def values(
        self, *, id: str, tag: str, head: str, tail: str, rest: str = "", escape: bool = True
    ) -> list[str]:
        """The holes' values a publish sends for one event whose envelope is ``head``,
        its number, ``tail`` (and, when the script inserts its pending entry's body
        after ``tail``, ``rest``), in :data:`_SENT` order and then ``rest``: the
        envelope escaped as it reads in the message (``escape``), else as it is, for
        the script to escape (the number and the queue are the script's)."""
        envelope = [head, tail, rest]
        return [id, tag, *(map(_in_body, envelope) if escape else envelope)]

    def render(
        self, *, id: str, queue: str, tag: str, head: str, tail: str, seq: str, who: str
    ) -> str:
        """The message of one event numbered ``seq``, as the script fills it in."""
        values = self.values(id=id, tag=tag, head=head, tail=tail)[:-1]
        sent = dict(zip(_SENT, values, strict=True))
        filled = {**sent, "queue": queue, "seq": seq, "who": who, **self.process}
        return "".join(c if i % 2 == 0 else filled[c] for i, c in enumerate(self._chunks))

    def lua(self) -> str:
        """The template as a Lua table, the publish script's prelude."""
        return f"local TEMPLATE = {{{', '.join(_lua_string(c) for c in self._chunks)}}}\n"


@dataclass(frozen=True)
class PendingPush:
    """A checkpoint save's entry for its thread's pending list (:mod:`tulip_wire.pending`):
    the list's key, the entry, the list's TTL in ms."""

    key: str
    entry: str
    ttl_ms: int


class DirectPublisher:
    """Numbers and enqueues an event with one script call (see the module doc)."""

    def __init__(
        self,
        client: redis.Redis,
        settings: ProducerSettings,
        templates: Mapping[str, MessageTemplate],
    ) -> None:
        self._ttl_ms = int(settings.status_ttl * 1000)
        self._seq_idle_ms = int(settings.seq_idle_ttl * 1000)
        self._quota: PublishQuota = settings.quota
        self._templates = dict(templates)
        self._scripts = {
            task: client.register_script(template.lua() + FUNCTIONS + _SCRIPT)
            for task, template in self._templates.items()
        }

    @classmethod
    def create(
        cls,
        client: redis.Redis,
        settings: ProducerSettings,
        app: Celery,
        queue: Callable[[str], Queue],
    ) -> Self | None:
        """A direct publisher of every event type, or None when a task's message cannot
        be templated (then the general path publishes)."""
        templates = {}
        for kind, task in TASKS.items():
            template = MessageTemplate.build(app, task, kind, queue)
            if template is None:
                return None
            templates[task] = template
        return cls(client, settings, templates)

    def publish(
        self,
        wire: Encoded,
        router: ShardRouter,
        pending: PendingPush | None = None,
        *,
        quota: bool = True,
    ) -> int | None:
        """Publish ``wire`` on ``router``'s queue, numbered by the script (and, for a
        checkpoint save, its ``pending`` entry appended in the same script, so the
        pending list is in the order of the sequence numbers); the sequence number it
        got, or ``None`` when the layout record disagrees with ``router`` (then nothing
        was done). Over its tenant's quota (``quota``: checked), raises
        :class:`~tulip_producer.quota.QuotaExceeded` and nothing was done."""
        env = wire.env
        queue = router.queue(env.key)
        task = TASKS[env.type]
        tail, rest, shared = wire.tail, "", 0
        if pending is not None and len(pending.entry) <= SHARED_BODY_MAX:
            # the envelope's patch is the entry's body: sent once, escaped by the script
            start = pending.entry.index("\n") + 1  # after the entry's ASCII header
            at = wire.tail.find(pending.entry[start:]) if start < len(pending.entry) else -1
            if at >= 0:
                tail, rest = wire.tail[:at], wire.tail[at + len(pending.entry) - start :]
                shared = start + 1
        raw = env.type == CHECKPOINT_SAVED and len(wire.head) + len(wire.tail) <= RAW_ENVELOPE_MAX
        values = self._templates[task].values(
            id=env.id, tag=delivery_tag(), head=wire.head, tail=tail, rest=rest, escape=not raw
        )
        tenant = tenant_of_key(env.key)
        keys = [seq_key(env.key), PublishedEvents.key(env.id)]
        keys += [layout_key(router.prefix), queue, quota_key(tenant)]
        args: list[str | int] = [self._ttl_ms, str(router.shards), *values, shared]
        args.append(int(raw))
        args += [self._templates[task].process.get(name, "") for name in _PROCESS]
        args += [self._seq_idle_ms, env.key, *(self._quota.args() if quota else ("0", 0))]
        args.append(who(env.key))
        if pending is not None:
            keys.append(pending.key)
            args += [pending.entry, pending.ttl_ms]
        seq, detail = self._scripts[task](keys=keys, args=args)
        if int(seq) == OVER_QUOTA:
            raise self._quota.exceeded(tenant, int(detail))
        return None if int(seq) < 0 else int(seq)


class _Capture:
    """What :func:`send_event` stores for one event of ``task``, taken from kombu's
    in-memory transport: the dict kombu's Redis transport would write, its body left
    plain (``body_encoding`` None), its delivery tag the one given."""

    def __init__(self, app: Celery, task: str, kind: str, queue: Callable[[str], Queue]) -> None:
        self.app, self.task, self.kind, self.queue = app, task, kind, queue

    def __call__(
        self, *, id: str, queue: str, tag: str, text: str, seq: str, who: str
    ) -> dict[str, Any]:
        with Connection("memory://", transport_options={"body_encoding": None}) as connection:
            channel = connection.default_channel
            try:
                send_event(
                    self.app, connection, self.task, event_id=id, kind=self.kind, seq=seq,
                    text=text, queue=self.queue(queue), who=who,
                )  # fmt: skip
                message = channel.basic_get(queue, no_ack=True)
            finally:
                channel.queue_delete(queue)
        if message is None:
            raise LookupError("send_task stored nothing")
        stored: dict[str, Any] = message._raw
        stored["properties"]["delivery_tag"] = tag
        return stored


def delivery_tag() -> str:
    """A message's delivery tag: 16 random URL-safe characters (96 bits)."""
    return secrets.token_urlsafe(12)


def _chunks(text: str, marks: Mapping[str, str]) -> list[str]:
    """``text`` cut at the marks: literal text and hole names, alternately."""
    marked = re.compile("(" + "|".join(re.escape(m) for m in marks.values()) + ")")
    names = {m: n for n, m in marks.items()}
    out: list[str] = []
    for i, piece in enumerate(marked.split(text)):
        if i % 2 == 0:
            out.append(piece)
        elif names[piece] == "env":  # the envelope: its head, the number, its tail
            out += ["head", "", "seq", "", "tail"]
        else:
            out.append(names[piece])
    return out


def _lua_string(text: str) -> str:
    """``text`` as a Lua string literal: printable ASCII as it is, any other byte (and
    quote, backslash) as a decimal escape, so nothing in it can end the literal."""
    data = text.encode("utf-8")
    body = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:03d}" for b in data)
    return f'"{body}"'


def _in_body(text: str) -> str:
    """``text`` as it reads inside the message: a string in the task's args, escaped
    once, in the body, a string in the message, escaped once more."""
    return json.dumps(json.dumps(text)[1:-1])[1:-1]


def _refused(task: str, why: str) -> None:
    log.warning(
        "the one-round-trip publish is off: Celery's %s message cannot be templated "
        "(%s); events go through send_task",
        task,
        why,
    )

"""Versioned event envelopes: JSON on the wire, one validation path for everyone.

The producer builds envelopes and :func:`encode` s them; workers :func:`decode`
them. ``decode`` checks everything a worker relies on and raises :class:`EventError`
with a reason naming the problem, so a malformed or unknown event is dead-lettered
with that reason instead of crashing a worker or being half-applied.

Wire shape (schema version 1)::

    {"v": 1, "id": "<32 hex>", "type": "session.ended", "key": "<routing key>",
     "seq": 7, "ts": 1764437000.25, "payload": {...}}               # inline, or
    {..., "payload": null, "payload_ref": {"url": "...", "sha256": "...", "size": 123}}
    {..., "sig": "<64 hex: HMAC-SHA256, when TULIP_EVENT_SIGNING_KEY is set>"}

``key`` is the ordering key: the namespace (parts joined by ``\\x1f``) for
``session.ended``, the tenant and the thread id (joined by ``\\x1f``:
:func:`thread_key`) for ``checkpoint.saved``, whose payload names both: thread state is
keyed by (tenant, thread id), so the same thread id in two tenants is two threads.
``seq`` is the key's sequence number, assigned at publish; per key, a higher seq was
published later.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tulip_memory.errors import TulipMemoryError
from tulip_memory.messages import Message
from tulip_memory.state import AgentState
from tulip_memory.store.validation import NS_SEP, validate_namespace
from tulip_memory.times import TIME_FIELD, stated_time
from tulip_wire import forget, topology
from tulip_wire.jsonpath import non_json_value

SCHEMA_VERSION = 1
SESSION_ENDED = "session.ended"
CHECKPOINT_SAVED = "checkpoint.saved"
#: Erase events (:mod:`tulip_wire.forget`): a namespace's memories and turns, some of its
#: messages, or a whole tenant (on an extraction shard); a thread's state (on a
#: checkpoint shard). Each is ordered with its subject's other events by its key.
MEMORY_FORGET = "memory.forget"
THREAD_FORGET = "thread.forget"
FORGET_TYPES = frozenset({MEMORY_FORGET, THREAD_FORGET})
EVENT_TYPES = frozenset({SESSION_ENDED, CHECKPOINT_SAVED, *FORGET_TYPES})
#: Celery task names the content events are delivered to (one message template each).
TASKS = {SESSION_ENDED: topology.EXTRACT_TASK, CHECKPOINT_SAVED: topology.CHECKPOINT_TASK}
#: The task of every event type: an erase goes to the task of its subject's role, so it
#: shares that role's per-key order.
ALL_TASKS = {
    **TASKS,
    MEMORY_FORGET: topology.EXTRACT_TASK,
    THREAD_FORGET: topology.CHECKPOINT_TASK,
}
#: The event type whose shard router an event takes (its role's).
ROLE_OF = {**{t: t for t in TASKS}, MEMORY_FORGET: SESSION_ENDED, THREAD_FORGET: CHECKPOINT_SAVED}
MAX_KEY_CHARS = 2048
MAX_THREAD_ID_CHARS = 512
#: The largest inline envelope (UTF-8 bytes) a producer sends and a worker accepts
#: (``TULIP_MAX_EVENT_BYTES``); a larger payload travels by claim-check.
DEFAULT_MAX_EVENT_BYTES = 256 * 1024
#: The largest claim-checked payload a worker fetches (``TULIP_MAX_CLAIM_BYTES``).
DEFAULT_MAX_CLAIM_BYTES = 32 * 1024 * 1024
#: JSON escapes of NUL and of UTF-16 surrogates: only with one of them in the body can
#: the parsed text hold what no Postgres text column takes (checked precisely then).
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
#: The same in text as :func:`encode` writes it (lone surrogates stay raw there).
_SUSPECT_TEXT = re.compile("\\\\u0000|[\ud800-\udfff]")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX16 = re.compile(r"[0-9a-f]{16}")


class EventError(TulipMemoryError, ValueError):
    """An event that cannot be applied; ``reason`` says why, ``event_id`` if known."""

    def __init__(self, reason: str, event_id: str | None = None) -> None:
        self.reason = reason
        self.event_id = event_id
        super().__init__(f"event {event_id or '?'}: {reason}")


@dataclass(frozen=True, kw_only=True)
class PayloadRef:
    """Where a claim-checked payload lives, and how to know it is the right one."""

    url: str
    sha256: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "sha256": self.sha256, "size": self.size}


@dataclass(frozen=True, kw_only=True)
class Envelope:
    """One event. Build with :func:`session_ended`; ``seq`` is set at publish."""

    type: str
    key: str
    payload: dict[str, Any] | None
    payload_ref: PayloadRef | None = None
    seq: int | None = None
    ts: float = 0.0
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    v: int = SCHEMA_VERSION
    #: HMAC signature (:mod:`tulip_wire.signing`); a change of any signed field drops it.
    sig: str | None = None

    def with_seq(self, seq: int) -> Envelope:
        return replace(self, seq=seq, sig=None)

    def with_ref(self, ref: PayloadRef) -> Envelope:
        return replace(self, payload=None, payload_ref=ref, sig=None)

    @property
    def task(self) -> str:
        return ALL_TASKS[self.type]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "v": self.v,
            "id": self.id,
            "type": self.type,
            "key": self.key,
            "seq": self.seq,
            "ts": self.ts,
            "payload": self.payload,
        }
        if self.payload_ref is not None:
            d["payload_ref"] = self.payload_ref.to_dict()
        if self.sig is not None:
            d["sig"] = self.sig
        return d


def namespace_key(namespace: tuple[str, ...]) -> str:
    """The ordering key of a namespace."""
    return NS_SEP.join(validate_namespace(namespace))


def session_ended(
    namespace: tuple[str, ...],
    thread_id: str,
    messages: list[Message] | list[dict[str, Any]],
    metadata: Mapping[str, Any] | None = None,
    *,
    ts: float,
) -> Envelope:
    """A ``session.ended`` event, validated as a worker will validate it."""
    env = session_envelope(namespace, thread_id, messages, metadata, ts=ts)
    validate(env)
    return env


def session_envelope(
    namespace: tuple[str, ...],
    thread_id: str,
    messages: list[Message] | list[dict[str, Any]],
    metadata: Mapping[str, Any] | None = None,
    *,
    ts: float,
) -> Envelope:
    """:func:`session_ended`'s event, its payload not yet validated: for a caller whose
    next step validates it anyway (:meth:`Encoded.of`, before anything is published),
    so the request path checks every message once."""
    payload = {
        "namespace": list(validate_namespace(namespace)),
        "thread_id": thread_id,
        "messages": [m.to_dict() if isinstance(m, Message) else dict(m) for m in messages],
        "metadata": dict(metadata or {}),
    }
    return Envelope(type=SESSION_ENDED, key=namespace_key(namespace), payload=payload, ts=ts)


def idempotent_id(key: str, thread_id: str, idempotency_key: str) -> str:
    """The event id of a caller's idempotency key: 32 hex digits of a BLAKE2b digest of
    the namespace key, the thread and the caller's key, so the same session published
    twice is one event, and two tenants' equal keys are two events."""
    text = "\x1f".join((key, thread_id, idempotency_key))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def tenant_of_key(key: str) -> str:
    """The tenant of an ordering key: a namespace's first part, a thread's tenant."""
    return key.split(NS_SEP, 1)[0]


def thread_key(tenant: str, thread_id: str) -> str:
    """The ordering key of a tenant's thread (injective: a tenant holds no ``\\x1f``)."""
    (checked,) = validate_namespace((tenant,))
    return f"{checked}{NS_SEP}{thread_id}"


def memory_forget(
    scope: str,
    tenant: str,
    namespace: tuple[str, ...] | None = None,
    message_ids: list[str] | None = None,
    *,
    ts: float,
) -> Envelope:
    """A ``memory.forget`` event (:mod:`tulip_wire.forget`), validated."""
    payload = forget.memory_payload(scope, tenant, namespace, message_ids)
    problem = forget.problem(False, payload)
    if problem is not None:
        raise EventError(problem)
    env = Envelope(type=MEMORY_FORGET, key=forget.subject_key(payload), payload=payload, ts=ts)
    validate(env)
    return env


def thread_forget(tenant: str, thread_id: str, *, ts: float) -> Envelope:
    """A ``thread.forget`` event of ``tenant``'s thread, validated."""
    payload = {"tenant": tenant, "thread_id": thread_id}
    env = Envelope(type=THREAD_FORGET, key=thread_key(tenant, thread_id), payload=payload, ts=ts)
    validate(env)
    return env


def checkpoint_saved(
    tenant: str,
    thread_id: str,
    checkpoint_id: str,
    state: Mapping[str, Any],
    *,
    ts: float,
    exact: bool = False,
) -> Envelope:
    """A ``checkpoint.saved`` event of ``tenant``'s thread carrying the state
    (``AgentState.to_checkpoint()``); ``exact=True`` when the caller has already
    checked that the state survives JSON exactly (:func:`tulip_wire.statedelta.snapshot`)."""
    payload = {
        "tenant": tenant,
        "thread_id": thread_id,
        "checkpoint_id": checkpoint_id,
        "state": dict(state),
    }
    event_id = uuid.uuid4().hex
    _check_payload(CHECKPOINT_SAVED, payload, event_id)  # the tenant too, before its key
    key = thread_key(tenant, thread_id)
    env = Envelope(type=CHECKPOINT_SAVED, key=key, payload=payload, ts=ts, id=event_id)
    if exact:
        return env
    try:
        exact = json.loads(json.dumps(payload["state"], allow_nan=False)) == payload["state"]
    except (TypeError, ValueError) as e:
        where = non_json_value(payload["state"], "state")
        raise EventError(f"state is not JSON-serializable: {where or e}", env.id) from e
    if not exact:
        raise EventError(
            "state does not survive JSON exactly (non-string keys, tuples or sets?): "
            "a checkpoint must load back as it was saved",
            env.id,
        )
    return env


def checkpoint_delta(
    tenant: str,
    thread_id: str,
    checkpoint_id: str,
    *,
    base: str,
    patch: list[Any],
    digest: str,
    ts: float,
) -> Envelope:
    """A ``checkpoint.saved`` event carrying what changed since checkpoint ``base`` of
    the same thread (a :mod:`~tulip_wire.statedelta` patch) and the digest of the
    state it makes, instead of the whole state."""
    payload = {
        "tenant": tenant,
        "thread_id": thread_id,
        "checkpoint_id": checkpoint_id,
        "delta": {"base": base, "patch": patch, "digest": digest},
    }
    event_id = uuid.uuid4().hex
    _check_payload(CHECKPOINT_SAVED, payload, event_id)
    key = thread_key(tenant, thread_id)
    return Envelope(type=CHECKPOINT_SAVED, key=key, payload=payload, ts=ts, id=event_id)


def encode(env: Envelope) -> str:
    """The envelope as compact JSON text (no spaces: every copy of an event a broker
    keeps is that much smaller); raises :class:`EventError` if it is not valid."""
    validate(env)
    try:
        text = json.dumps(env.to_dict(), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        where = non_json_value(env.payload)
        hint = " (times: an ISO 8601 string or epoch seconds)" if "datetime" in str(where) else ""
        raise EventError(f"not JSON-serializable: {where or e}{hint}", env.id) from e
    if _SUSPECT_TEXT.search(text):  # refused here as a worker's decode would refuse it
        _check_storable(env.to_dict(), env.id)
    return text


#: How :func:`encode` writes the ``seq`` of an envelope not yet numbered.
_UNNUMBERED = '"seq":null'
#: How many more characters a sequence number takes than that ``null`` at most (Redis
#: ``INCR`` stops at 2**63 - 1): the room a size check leaves for it.
SEQ_ROOM = len(str(2**63 - 1)) - len("null")


@dataclass(frozen=True)
class Encoded:
    """An envelope not yet numbered, encoded once: ``text`` as :func:`encode` writes it
    (``"seq":null``), ``head`` and ``tail`` the text on either side of that ``null``.
    ``head + str(n) + tail`` is the encoding of ``env.with_seq(n)`` (unsigned), so the
    spool, the size check and the publish share one encoding, whatever number the event
    gets."""

    env: Envelope
    text: str
    head: str
    tail: str

    @classmethod
    def of(cls, env: Envelope) -> Encoded:
        """``env`` encoded without its ``seq`` and ``sig`` (the producer numbers and signs
        at publish); raises :class:`EventError` when it is not valid."""
        if env.seq is not None or env.sig is not None:
            env = replace(env, seq=None, sig=None)
        text = encode(env)
        # The first match is the envelope's own seq: a match ends in an unescaped quote
        # followed by ":", the end of an object's key, and the only object before the
        # seq is the envelope, whose keys there are v, id, type and key.
        at = text.index(_UNNUMBERED) + len(_UNNUMBERED) - len("null")
        return cls(env, text, text[:at], text[at + len("null") :])

    def numbered(self, seq: int) -> str:
        """The encoding of ``env.with_seq(seq)``."""
        return f"{self.head}{seq}{self.tail}"


def decode(text: object, *, max_bytes: int | None = None) -> Envelope:
    """Parse and validate one event from the wire. Anything wrong with it, whatever
    the body is (not text, too large, nested too deep, text Postgres cannot store),
    is an :class:`EventError`; nothing else escapes."""
    try:
        return _decode(text, max_bytes)
    except EventError:
        raise
    except Exception as e:  # RecursionError, MemoryError's kin, a bug in a check
        raise EventError(f"cannot decode: {type(e).__name__}: {str(e)[:200]}") from e


def _decode(text: object, max_bytes: int | None) -> Envelope:
    data = _wire_bytes(text)
    if max_bytes is not None and len(data) > max_bytes:
        raise EventError(
            f"body is {len(data)} bytes, over the {max_bytes} of TULIP_MAX_EVENT_BYTES "
            "(larger payloads travel by claim-check)"
        )
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise EventError(f"not valid JSON: {e}") from e
    if not isinstance(raw, dict):
        raise EventError(f"an event must be a JSON object, got {type(raw).__name__}")
    event_id = raw.get("id") if isinstance(raw.get("id"), str) else None
    version = raw.get("v")
    if version != SCHEMA_VERSION:
        raise EventError(
            f"unknown schema version {version!r} (this worker reads {SCHEMA_VERSION})", event_id
        )
    if _SUSPECT_ESCAPE.search(data):
        _check_storable(raw, event_id)
    env = Envelope(
        v=version,
        id=_field(raw, "id", str, event_id),
        type=_field(raw, "type", str, event_id),
        key=_field(raw, "key", str, event_id),
        seq=_field(raw, "seq", int, event_id),
        ts=float(_field(raw, "ts", (int, float), event_id)),
        payload=raw.get("payload"),
        payload_ref=_ref(raw.get("payload_ref"), event_id),
        sig=_sig(raw.get("sig"), event_id),
    )
    validate(env)
    return env


def _wire_bytes(text: object) -> bytes:
    """The body as UTF-8 (text without lone surrogates)."""
    if isinstance(text, bytes):
        data = text
    elif isinstance(text, str):
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise EventError(f"body holds a lone surrogate at character {e.start}") from e
    else:
        raise EventError(f"an event body must be JSON text, got {type(text).__name__}")
    return data


def _check_storable(raw: Any, event_id: str | None) -> None:
    """No string of the event (keys included) holds a NUL or a lone surrogate."""
    todo: list[Any] = [raw]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo += item.keys()
            todo += item.values()
        elif isinstance(item, list):
            todo += item
        elif isinstance(item, str):
            if "\x00" in item:
                raise EventError("the event's text holds a NUL character", event_id)
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as e:
                raise EventError("the event's text holds a lone UTF-16 surrogate", event_id) from e


def _sig(raw: Any, event_id: str | None) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or len(raw) != 64 or not all(c in "0123456789abcdef" for c in raw):
        raise EventError("sig must be 64 lower-case hex digits", event_id)
    return raw


def validate(env: Envelope) -> None:
    """Every rule an envelope must satisfy, payload included when it is inline."""
    if env.v != SCHEMA_VERSION:
        raise EventError(f"unknown schema version {env.v!r}", env.id)
    if len(env.id) != 32 or not all(c in "0123456789abcdef" for c in env.id):
        raise EventError(f"id must be 32 lower-case hex digits, got {env.id!r}", env.id)
    if env.type not in EVENT_TYPES:
        raise EventError(f"unknown event type {env.type!r}", env.id)
    if not env.key or len(env.key) > MAX_KEY_CHARS or "\x00" in env.key:
        raise EventError(f"key must be 1..{MAX_KEY_CHARS} characters without NUL", env.id)
    if env.seq is not None and (isinstance(env.seq, bool) or env.seq < 1):
        raise EventError(f"seq must be a positive integer, got {env.seq!r}", env.id)
    if not math.isfinite(env.ts) or env.ts < 0:
        raise EventError(f"ts must be a finite epoch time, got {env.ts!r}", env.id)
    if (env.payload is None) == (env.payload_ref is None):
        raise EventError("exactly one of payload and payload_ref must be set", env.id)
    if env.payload is not None:
        check_payload(env, env.payload)


def decode_payload(env: Envelope, data: bytes) -> dict[str, Any]:
    """A claim-checked payload's bytes, parsed and validated against its envelope;
    like :func:`decode`, every problem is an :class:`EventError`."""
    try:
        payload = json.loads(data)
        if _SUSPECT_ESCAPE.search(data):
            _check_storable(payload, env.id)
        return check_payload(env, payload)
    except EventError:
        raise
    except ValueError as e:
        raise EventError(f"claim-checked payload is not valid JSON: {e}", env.id) from e
    except Exception as e:
        raise EventError(
            f"cannot decode the claim-checked payload: {type(e).__name__}", env.id
        ) from e


def check_payload(env: Envelope, payload: Any) -> dict[str, Any]:
    """Validate a payload (inline, or fetched by claim-check) against its envelope: its
    namespace, or tenant and thread id, must produce the envelope's key, so a message
    cannot be routed, sequenced or fenced as one key while it writes another."""
    _check_payload(env.type, payload, env.id)
    if env.type == SESSION_ENDED and namespace_key(tuple(payload["namespace"])) != env.key:
        raise EventError("key does not match the payload's namespace", env.id)
    if env.type in (CHECKPOINT_SAVED, THREAD_FORGET) and thread_key(
        payload["tenant"], payload["thread_id"]
    ) != (env.key):
        raise EventError("key does not match the payload's tenant and thread_id", env.id)
    if env.type == MEMORY_FORGET and forget.subject_key(payload) != env.key:
        raise EventError("key does not match the erase's subject", env.id)
    return dict(payload)


def _check_payload(kind: str, payload: Any, event_id: str) -> None:
    if not isinstance(payload, dict):
        raise EventError(f"payload must be an object, got {type(payload).__name__}", event_id)
    if kind == SESSION_ENDED:
        _check_session_ended(payload, event_id)
    elif kind == CHECKPOINT_SAVED:
        _check_checkpoint_saved(payload, event_id)
    elif kind in FORGET_TYPES:
        problem = forget.problem(kind == THREAD_FORGET, payload)
        if problem is not None:
            raise EventError(problem, event_id)


def _check_thread_id(p: dict[str, Any], event_id: str) -> None:
    thread = p.get("thread_id")
    if not isinstance(thread, str) or not thread or len(thread) > MAX_THREAD_ID_CHARS:
        raise EventError(
            f"payload.thread_id must be a string of 1..{MAX_THREAD_ID_CHARS} characters",
            event_id,
        )
    if "\x00" in thread:
        raise EventError("payload.thread_id contains a NUL character", event_id)


def _check_checkpoint_saved(p: dict[str, Any], event_id: str) -> None:
    if "tenant" not in p:
        raise EventError(
            "payload.tenant is missing: a checkpoint.saved event from before thread state "
            "was keyed by tenant; drain the checkpoint queues before upgrading (docs: "
            "chat-backend.md, Upgrading from tenant-less threads)",
            event_id,
        )
    try:
        validate_namespace((p["tenant"],))
    except (TypeError, ValueError) as e:
        raise EventError(f"payload.tenant: {e}", event_id) from e
    _check_thread_id(p, event_id)
    cid = p.get("checkpoint_id")
    if not isinstance(cid, str) or len(cid) != 32 or not all(c in "0123456789abcdef" for c in cid):
        raise EventError("payload.checkpoint_id must be 32 lower-case hex digits", event_id)
    if ("state" in p) == ("delta" in p):
        raise EventError("payload must hold exactly one of state and delta", event_id)
    if "delta" in p:
        _check_delta(p["delta"], cid, event_id)
        return
    try:
        AgentState.from_checkpoint(p.get("state"))  # type: ignore[arg-type]
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise EventError(f"payload.state is not an agent state: {e}", event_id) from e
    check_messages(p["state"].get("messages") or [], "payload.state.messages", event_id)


def _check_delta(delta: Any, checkpoint_id: str, event_id: str) -> None:
    """A delta's shape; whether it applies is the worker's check, against its base."""
    if not isinstance(delta, dict) or set(delta) != {"base", "patch", "digest"}:
        raise EventError("payload.delta must be an object of base, patch and digest", event_id)
    base, digest = delta["base"], delta["digest"]
    if not isinstance(base, str) or not _HEX32.fullmatch(base) or base == checkpoint_id:
        raise EventError(
            "payload.delta.base must be another checkpoint id (32 lower-case hex digits)",
            event_id,
        )
    if not isinstance(digest, str) or not _HEX16.fullmatch(digest):
        raise EventError("payload.delta.digest must be 16 lower-case hex digits", event_id)
    if not isinstance(delta["patch"], list) or not delta["patch"]:
        raise EventError("payload.delta.patch must be a patch (a non-empty list)", event_id)


def _check_session_ended(p: dict[str, Any], event_id: str) -> None:
    ns = p.get("namespace")
    if not isinstance(ns, list):
        raise EventError("payload.namespace must be a list of strings", event_id)
    try:
        validate_namespace(tuple(ns))
    except (TypeError, ValueError) as e:
        raise EventError(f"payload.namespace: {e}", event_id) from e
    _check_thread_id(p, event_id)
    check_messages(p.get("messages"), "payload.messages", event_id, timed=True)
    if not isinstance(p.get("metadata", {}), dict):
        raise EventError("payload.metadata must be an object", event_id)
    try:
        stated_time(p.get("metadata", {}))
    except ValueError as e:
        raise EventError(f"payload.metadata.{TIME_FIELD}: {e}", event_id) from e


#: A message's fields that hold text (or nothing).
_MESSAGE_TEXT = ("content", "tool_call_id", "name")


def check_messages(
    messages: Any, path: str, event_id: str, *, start: int = 0, timed: bool = False
) -> None:
    """Every message of ``messages`` from ``start`` on is one every worker can process
    (each field of its type: ``content=123`` is refused here, at publish, not by a
    worker's ``AttributeError`` four attempts later), or :class:`EventError` naming
    its path. ``timed``: a message's stated time must parse too. The producer and the
    workers both call this (through :func:`validate`, and for a checkpoint's new
    messages), so what one refuses the other does."""
    if not isinstance(messages, list):
        raise EventError(f"{path} must be a list", event_id)
    for i in range(start, len(messages)):
        problem = _message_problem(messages[i], timed)
        if problem is not None:
            raise EventError(f"{path}[{i}]{problem}", event_id)


def _message_problem(m: Any, timed: bool) -> str | None:
    if not isinstance(m, dict):
        return f" must be an object, got {type(m).__name__}"
    for name in _MESSAGE_TEXT:
        value = m.get(name)
        if value is not None and not isinstance(value, str):
            return f".{name} must be a string, got {type(value).__name__}"
    if m.get("metadata") is not None and not isinstance(m["metadata"], dict):
        return f".metadata must be an object, got {type(m['metadata']).__name__}"
    calls = m.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        return f".tool_calls must be a list, got {type(calls).__name__}"
    for j, call in enumerate(calls or ()):
        if not isinstance(call, dict) or not all(
            isinstance(call.get(k), str) for k in ("id", "name")
        ):
            return f".tool_calls[{j}] must be an object with a string id and name"
    try:
        message = Message.from_dict(m)
        if timed:
            stated_time(message.metadata)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return f" is not a message: {e!r}"
    return None


def _field(raw: dict[str, Any], name: str, kind: Any, event_id: str | None) -> Any:
    value = raw.get(name)
    if name == "seq" and value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise EventError(f"field {name!r} is missing or has the wrong type: {value!r}", event_id)
    return value


def _ref(raw: Any, event_id: str | None) -> PayloadRef | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise EventError("payload_ref must be an object", event_id)
    try:
        return PayloadRef(url=str(raw["url"]), sha256=str(raw["sha256"]), size=int(raw["size"]))
    except (KeyError, TypeError, ValueError) as e:
        raise EventError(f"payload_ref is malformed: {e!r}", event_id) from e


def decode_messages(payload: dict[str, Any]) -> list[Message]:
    """The session's messages as :class:`Message` objects."""
    return [Message.from_dict(m) for m in payload["messages"]]

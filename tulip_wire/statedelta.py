"""Thread states as deltas on the wire: what changed since a known base, and its digest.

Pure functions, no I/O. A :class:`Snapshot` is a state as it was published: its
fields' canonical JSON (sorted keys, no spaces, as :func:`tulip_memory.delta.codec.dumps`),
the parsed values (parsed from those bytes, never the caller's objects, so a caller
mutating its state afterwards changes nothing here), and the digest of the whole
state's canonical bytes: the digest the checkpoint store computes
(:func:`tulip_memory.delta.codec.digest`), so producer, reader and worker check the
same thing.

:func:`advance` moves a snapshot to the next state. When the state's top-level lists
only grew (messages appended, the common case) and its other fields are small, it
encodes each field once and then:

- checks that each list's old bytes are a prefix of its new bytes (a ``memcmp``) and
  that its old items equal the new ones (``==``): together exact, since the old items
  are what the old bytes parse to (``==`` alone would take ``1`` for ``1.0``, bytes
  alone a tuple for a list);
- parses back only the appended items and the other fields, refusing what JSON would
  not carry exactly;
- yields the patch (:mod:`tulip_memory.delta.diff` format): a tail per grown list, a
  diff of the other fields.

When the caller knows a list's first items are the base's own objects (the messages
the last save was made from, :mod:`tulip_memory.delta.known`), only the items after
them are encoded and parsed back: the save costs what it appended.

Anything else (an edit, a removal, no base) encodes and parses back the whole state,
and the patch, when there is a base, is :func:`~tulip_memory.delta.diff.diff` of the
two, checked by the digest of what it rebuilds (``diff`` compares with ``==``, which
takes ``1`` for ``1.0``): a patch that would not rebuild the exact bytes is not sent,
the state goes whole. :func:`apply_delta` is the other end: the patch applied onto its base, checked
against the digest, every problem a :class:`DeltaError` naming the base.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tulip_memory.delta.codec import digest as state_digest
from tulip_memory.delta.diff import Patch, apply, diff
from tulip_memory.delta.known import MESSAGES, starts_with
from tulip_memory.messages import Message
from tulip_memory.state import AgentState
from tulip_wire.events import check_messages
from tulip_wire.jsonpath import non_json_value

#: A snapshot's own bytes count this much per field besides its JSON (the cache's
#: accounting of parsed values is by their canonical bytes).
_FIELD_OVERHEAD = 64


class NotJSON(ValueError):
    """A state JSON cannot carry exactly; the message says where and why."""


class DeltaError(ValueError):
    """A delta that does not rebuild its state from its base; the message names the base."""


@dataclass(frozen=True)
class Snapshot:
    """A published state: ``values`` (every field, parsed from ``raw``), ``raw`` (each
    field's canonical JSON), the digest of the state's canonical bytes and their size."""

    values: dict[str, Any]
    raw: dict[str, bytes]
    digest: str
    size: int

    @property
    def data(self) -> dict[str, Any]:
        """The state (a new dict; its values are shared: treat them as immutable)."""
        return dict(self.values)


@dataclass(frozen=True)
class Step:
    """The next snapshot and the patch onto the previous one (None: send it whole)."""

    snapshot: Snapshot
    patch: Patch | None
    patch_bytes: int


def _encode(value: Any, path: str) -> bytes:
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as e:
        raise NotJSON(f"state is not JSON-serializable: {non_json_value(value, path) or e}") from e
    return text.encode("utf-8", "surrogatepass")


def _loads(raw: bytes) -> Any:
    return json.loads(raw.decode("utf-8", "surrogatepass"))


def _inexact() -> NotJSON:
    return NotJSON(
        "state does not survive JSON exactly (non-string keys, tuples or sets?): "
        "a checkpoint must load back as it was saved"
    )


def canonical(raw: dict[str, bytes]) -> bytes:
    """The state's canonical JSON from its fields' (keys sorted, as ``dumps``)."""
    body = b",".join(_encode(k, "key") + b":" + raw[k] for k in sorted(raw))
    return b"{" + body + b"}"


def _snapshot(values: dict[str, Any], raw: dict[str, bytes]) -> Snapshot:
    whole = canonical(raw)
    return Snapshot(values, raw, state_digest(whole), len(whole))


def snapshot(data: dict[str, Any]) -> Snapshot:
    """``data`` encoded and parsed back whole; :class:`NotJSON` if it does not survive."""
    if not isinstance(data, dict):
        raise NotJSON(f"a state must be a JSON object, got {type(data).__name__}")
    if any(not isinstance(k, str) for k in data):
        raise _inexact()
    raw = {k: _encode(v, f"state.{k}") for k, v in data.items()}
    values = {k: _loads(v) for k, v in raw.items()}
    if values != data:
        raise _inexact()
    return _snapshot(values, raw)


def advance(
    base: Snapshot | None, data: dict[str, Any], known: Mapping[str, int] | None = None
) -> Step:
    """``data`` as the snapshot after ``base``, with its patch from ``base`` when one
    is smaller than the state (else ``patch`` is None: the state goes whole).

    ``known``: lists whose first items (that many, all of ``base``'s) are ``base``'s
    own objects (:mod:`tulip_memory.delta.known`): only the items after them are
    encoded and checked."""
    if base is not None and isinstance(data, dict) and sorted(data) == sorted(base.values):
        grown = _grown(base, data, known or {})
        if grown is not None:
            return grown
    new = snapshot(data)
    if base is None:
        return Step(new, None, 0)
    patch = diff(base.values, new.values) or ["{", {}, []]
    size = len(_encode(patch, "patch"))
    # diff compares with ==, for which 1, 1.0 and True are alike: check the bytes.
    if size >= new.size or digest_of(apply(base.values, patch)) != new.digest:
        return Step(new, None, size)
    return Step(new, patch, size)


def _grown(base: Snapshot, data: dict[str, Any], known: Mapping[str, int]) -> Step | None:
    """The step when every list only grew, the other fields patched; None otherwise."""
    raw: dict[str, bytes] = {}
    values: dict[str, Any] = {}
    changed: dict[str, Any] = {}
    size = 0
    for key, value in data.items():
        old_raw, old = base.raw[key], base.values[key]
        if isinstance(value, list) and starts_with(value, old, known.get(key, 0)):
            if len(value) == len(old):
                raw[key], values[key] = old_raw, old
                continue
            tail_raw = _encode(value[len(old) :], f"state.{key}")[1:-1]
            tail = _loads(b"[" + tail_raw + b"]")
            if tail != value[len(old) :]:
                raise _inexact()
            raw[key] = old_raw[:-1] + b"," + tail_raw + b"]"
            values[key] = [*old, *tail]
            changed[key] = ["[", [[0, len(old)], {"+": tail}]]
            size += len(tail_raw) + 32
            continue
        new_raw = _encode(value, f"state.{key}")
        raw[key] = new_raw
        if new_raw == old_raw:
            if value != old:
                raise _inexact()
            values[key] = old
            continue
        if isinstance(old, list) and old and isinstance(value, list) and len(value) > len(old):
            prefix = old_raw[:-1]
            if not (new_raw.startswith(prefix) and new_raw[len(prefix)] == ord(",")):
                return None
            if value[: len(old)] != old:
                return None
            tail_raw = new_raw[len(prefix) + 1 : -1]
            tail = _loads(b"[" + tail_raw + b"]")
            if tail != value[len(old) :]:
                raise _inexact()
            values[key] = [*old, *tail]
            changed[key] = ["[", [[0, len(old)], {"+": tail}]]
            size += len(tail_raw) + 32
        elif len(new_raw) <= 4096:  # a small field: parse it back, patch it
            parsed = _loads(new_raw)
            if parsed != value:
                raise _inexact()
            values[key] = parsed
            piece = diff(old, parsed)
            # diff compares with ==, for which 1, 1.0 and True are alike: check the bytes.
            if not piece or _encode(apply(old, piece), "patch") != new_raw:
                piece = ["=", parsed]
            changed[key] = piece
            size += len(new_raw) + 16
        else:
            return None  # a large field edited: the full path diffs it
    new = _snapshot(values, raw)
    patch: Patch = ["{", changed, []]
    if size >= new.size:
        return Step(new, None, 0)
    return Step(new, patch, size)


def apply_delta(base: dict[str, Any], patch: Any, digest: str, base_id: str) -> dict[str, Any]:
    """The state ``patch`` makes of ``base`` (checkpoint ``base_id``), checked against
    ``digest``; :class:`DeltaError` naming the base for anything wrong."""
    try:
        out = apply(base, patch)
    except Exception as e:  # PatchError, RecursionError on a hostile nesting, ...
        raise DeltaError(
            f"the delta does not apply to its base checkpoint {base_id}: {type(e).__name__}"
        ) from e
    if not isinstance(out, dict):
        raise DeltaError(f"the delta onto base checkpoint {base_id} does not yield an object")
    got = digest_of(out)
    if got != digest:
        raise DeltaError(
            f"the delta onto base checkpoint {base_id} yields digest {got}, not {digest}: "
            "the base is not the state the producer diffed against"
        )
    return out


def onto_known(
    messages: Sequence[Message], fields: Mapping[str, Any], patch: Any
) -> AgentState | None:
    """The agent state ``patch`` makes of a base whose messages are ``messages`` (the
    objects themselves, kept in the result) and whose other fields are ``fields``,
    when the patch appends messages and patches only the other fields (the tail
    :func:`advance` sends); None for any other patch, or one that does not fit. Not
    checked against a digest here: the caller has the store check it
    (:meth:`~tulip_memory.delta.DeltaCheckpointer.save_onto_written`)."""
    if not (isinstance(patch, list) and len(patch) == 3 and patch[0] == "{"):
        return None
    changed, removed = patch[1], patch[2]
    if not isinstance(changed, dict) or not isinstance(removed, list) or MESSAGES in removed:
        return None
    tail: Any = []
    if MESSAGES in changed:
        piece = changed[MESSAGES]
        match piece:
            case ["[", [[0, int(count)], {"+": list(tail)}]] if count == len(messages):
                pass
            case _:
                return None
    others = {k: v for k, v in changed.items() if k != MESSAGES}
    try:
        check_messages(tail, "tail", "")  # one that is not: the checked path refuses it
        data = apply(dict(fields), ["{", others, removed])
        base = AgentState.from_checkpoint({**data, MESSAGES: []})
        return replace(base, messages=(*messages, *(Message.from_dict(m) for m in tail)))
    except Exception:  # PatchError, a malformed message, ...: the checked path decides
        return None


def digest_of(data: dict[str, Any]) -> str:
    """The digest of a parsed state's canonical bytes."""
    return state_digest(canonical({k: _encode(v, f"state.{k}") for k, v in data.items()}))


def footprint(snap: Snapshot) -> int:
    """What a cache counts for ``snap``: its canonical bytes plus a little per field."""
    return snap.size + _FIELD_OVERHEAD * len(snap.raw)

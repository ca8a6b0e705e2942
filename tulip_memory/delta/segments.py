"""The latest state in segments, so a save costs what it appended, not the thread.

Pure functions, no I/O. A head keeps the latest state as a *directory* section and
*segments*: each top-level list of the state that has items is stored as runs of
items (a run's canonical JSON items joined by ``,``, compressed on its own); every
other field sits in the directory, with the map of segments (list key, item count).
The state's canonical bytes are ``{`` + its fields in key order + ``}``, a list being
``[`` + its segments joined by ``,`` + ``]``: the bytes, and so the digest, that
:func:`~tulip_memory.delta.codec.encode_state` gives.

A save onto a known :class:`Latest` whose lists only grew (messages appended, the
common case) encodes the new state once, per top-level field, and then:

- checks that each list's old bytes are a prefix of its new bytes (a ``memcmp``) and
  that its old items equal the new ones (``==``): together exact, since the old
  items are what the old bytes parse to (``==`` alone would take ``1`` for ``1.0``);
- parses back only the appended items, to refuse what JSON would not carry exactly;
- compresses only each list's open (last) segment: it is rewritten at zlib level 1
  until it holds :func:`seal_size` bytes, then sealed once at the policy's level;
- yields the exact patch from the old state (a tail per list, a diff of the other
  fields checked by their bytes), with no second encode of the state;
- hashes only what changed for the state's digest: a :class:`Latest` keeps the hash
  of its bytes up to the end of its first list's items (:class:`HashMark`), and a
  save that appended to that list, the fields before it unchanged, goes on from a
  copy of it with the appended bytes and the fields after the list.

Anything else (an edit, a removal, a truncation, no known base) takes the full path:
every list is encoded and parsed back by chunks and segmented afresh, and the caller
diffs and verifies as before.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from tulip_memory.delta.codec import (
    compress,
    dumps,
    first_problem,
    hasher,
    loads,
    object_pieces,
)
from tulip_memory.delta.diff import Patch, apply, diff
from tulip_memory.delta.errors import CorruptCheckpointError, StateNotSerializableError
from tulip_memory.delta.known import starts_with

#: An open segment is sealed once it holds this many bytes (or 1/128 of its list).
SEGMENT_BYTES = 16 * 1024
#: Most segments a head holds (its frame counts 255 sections: manifest, directory).
MAX_SEGMENTS = 240
#: The level an open segment is compressed at while saves keep rewriting it.
OPEN_LEVEL = 1


@dataclass(frozen=True)
class Segment:
    """A run of ``count`` list items: ``size`` canonical bytes, ``packed`` compressed."""

    count: int
    size: int
    packed: bytes
    sealed: bool


@dataclass(frozen=True)
class ListField:
    """A top-level list with items: its parsed items, canonical bytes and segments."""

    items: list[Any]
    raw: bytes
    segments: tuple[Segment, ...]

    def segment_raw(self, index: int) -> bytes:
        """The canonical bytes of segment ``index`` (a slice of :attr:`raw`)."""
        start = 1 + sum(s.size + 1 for s in self.segments[:index])
        return self.raw[start : start + self.segments[index].size]


@dataclass(frozen=True)
class HashMark:
    """The digest's hash of a state's bytes up to the end of the items of its first
    list in key order (``key``): ``before``, the pieces before that list's bytes, then
    the list's bytes but its closing ``]`` (``size`` of them). Never updated: a digest
    goes on from a copy."""

    key: str
    before: tuple[bytes, ...]
    size: int
    hasher: Any


@dataclass(frozen=True)
class Latest:
    """A thread's latest state as a head stores it.

    ``values`` holds the parsed fields other than :attr:`lists` and ``fields`` their
    canonical bytes; every parsed value here is this module's own (parsed from
    bytes), never the caller's, so a cached Latest cannot change under it. ``mark``:
    where the next state's digest can start from (None without lists).
    """

    values: dict[str, Any]
    fields: dict[str, bytes]
    lists: dict[str, ListField]
    digest: str
    size: int
    mark: HashMark | None = field(default=None, compare=False, repr=False)

    @property
    def data(self) -> dict[str, Any]:
        """The state (a new dict; its values are shared: treat them as immutable)."""
        out = dict(self.values)
        out.update({k: f.items for k, f in self.lists.items()})
        return out

    @property
    def raw(self) -> bytes:
        """The canonical JSON of the state."""
        return _assemble(self.fields, self.lists)

    def sections(self, level: int) -> list[bytes]:
        """The head sections holding this state: the directory, then the segments."""
        index = [[k, s.count] for k, f in sorted(self.lists.items()) for s in f.segments]
        directory = compress(dumps({"s": index, "v": self.values}), level)
        packed = [s.packed for _, f in sorted(self.lists.items()) for s in f.segments]
        return [directory, *packed]


@dataclass(frozen=True)
class Encoded:
    """A new state as segments, and its exact patch from the base when one was found."""

    latest: Latest
    patch: Patch | None


def encode(
    data: dict[str, Any], base: Latest | None, level: int, known: Mapping[str, int] | None = None
) -> Encoded:
    """``data`` as a :class:`Latest`, appending to ``base`` where its lists only grew.

    ``known``: lists whose first items (that many, all of ``base``'s) the caller knows
    to be ``base``'s own (:mod:`~tulip_memory.delta.known`): only the items after
    them are encoded and checked. Raises :class:`StateNotSerializableError` for what
    JSON cannot carry exactly.
    """
    if not isinstance(data, dict):
        raise StateNotSerializableError("state", f"{type(data).__name__} is not a JSON object")
    bad_key = next((k for k in data if not isinstance(k, str)), None)
    if bad_key is not None:
        raise StateNotSerializableError("state", f"key {bad_key!r} is not a str")
    list_keys = sorted(k for k, v in data.items() if isinstance(v, list) and v)
    values_in = {k: v for k, v in data.items() if k not in list_keys}
    fields = {k: _encode(v, f"state.{k}") for k, v in values_in.items()}
    values = _parse_back(fields, values_in, data)
    grown = base is not None and sorted(base.lists) == list_keys
    lists: dict[str, ListField] = {}
    pieces: dict[str, Patch] = {}
    kept: set[str] = set()  # lists that are base's with items appended, or base's
    for key in list_keys:
        old = base.lists[key] if base is not None and grown else None
        appended: tuple[ListField, Patch | None] | None
        if old is not None and known and starts_with(data[key], old.items, known.get(key, 0)):
            appended = _extend(old, data[key], key, level)
        else:
            new_raw = _encode(data[key], f"state.{key}")
            appended = _append(old, data[key], new_raw, key, level) if old is not None else None
            if appended is None:
                grown = False
                lists[key] = _fresh(data[key], new_raw, key, level)
                continue
        lists[key], piece = appended
        kept.add(key)
        if piece is not None:
            pieces[key] = piece
    mark = base.mark if base is not None and base.mark and base.mark.key in kept else None
    latest = Latest(values, fields, lists, *_digest(fields, lists, mark))
    patch = _patch(base, latest, pieces) if grown and base is not None else None
    return Encoded(latest, patch)


def _encode(value: Any, path: str) -> bytes:
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as e:
        where, reason = first_problem(value, path) or (path, str(e))
        raise StateNotSerializableError(where, reason) from e
    return text.encode("utf-8", "surrogatepass")


def _parse_back(raw: dict[str, bytes], given: dict[str, Any], data: Any) -> dict[str, Any]:
    parsed = {k: loads(v) for k, v in raw.items()}
    if parsed != given:
        _refuse(data)
    return parsed


def _refuse(data: Any) -> NoReturn:
    path, reason = first_problem(data, "state") or ("state", "changes through JSON")
    raise StateNotSerializableError(path, reason)


def seal_size(list_bytes: int) -> int:
    """How many bytes an open segment holds before it is sealed."""
    return max(SEGMENT_BYTES, list_bytes // 128)


def _append(
    old: ListField, items: list[Any], new_raw: bytes, key: str, level: int
) -> tuple[ListField, Patch | None] | None:
    """``old`` grown to ``items``, with its patch; None unless only items were appended."""
    k = len(old.items)
    if len(items) == k:
        return (old, None) if new_raw == old.raw and items == old.items else None
    prefix = old.raw[:-1]
    if len(items) < k or not new_raw.startswith(prefix) or new_raw[len(prefix)] != ord(","):
        return None
    if items[:k] != old.items:
        return None
    tail_raw = new_raw[len(prefix) + 1 : -1]
    tail = loads(b"[" + tail_raw + b"]")
    if tail != items[k:]:
        _refuse({key: items})
    return _grown(old, tail, tail_raw, new_raw, level)


def _extend(
    old: ListField, items: list[Any], key: str, level: int
) -> tuple[ListField, Patch | None]:
    """``old`` grown to ``items``, whose first ``len(old.items)`` are old's own: only
    the items after them are encoded and parsed back."""
    k = len(old.items)
    if len(items) == k:
        return old, None
    tail_raw = _encode(items[k:], f"state.{key}")[1:-1]
    tail = loads(b"[" + tail_raw + b"]")
    if tail != items[k:]:
        _refuse({key: items})
    return _grown(old, tail, tail_raw, old.raw[:-1] + b"," + tail_raw + b"]", level)


def _grown(
    old: ListField, tail: list[Any], tail_raw: bytes, new_raw: bytes, level: int
) -> tuple[ListField, Patch]:
    """``old`` with ``tail`` (its canonical bytes ``tail_raw``) appended; ``new_raw``
    the grown list's bytes."""
    k = len(old.items)
    segments = list(old.segments)
    last = segments[-1]
    if not last.sealed:
        segments.pop()
        tail_raw = old.segment_raw(len(segments)) + b"," + tail_raw
        count = last.count + len(tail)
    else:
        count = len(tail)
    segments.append(_segment(count, tail_raw, seal_size(len(new_raw)), level))
    if len(segments) > MAX_SEGMENTS:
        segments = _repack(segments, new_raw, level)
    field = ListField([*old.items, *tail], new_raw, tuple(segments))
    return field, ["[", [[0, k], {"+": tail}]]


def _segment(count: int, raw: bytes, seal: int, level: int) -> Segment:
    sealed = len(raw) >= seal
    return Segment(count, len(raw), compress(raw, level if sealed else OPEN_LEVEL), sealed)


def _repack(segments: list[Segment], raw: bytes, level: int) -> list[Segment]:
    """Adjacent segments merged in pairs (the count halves), recompressed."""
    out: list[Segment] = []
    offset = 1
    for i in range(0, len(segments), 2):
        pair = segments[i : i + 2]
        size = sum(s.size for s in pair) + len(pair) - 1
        body = raw[offset : offset + size]
        offset += size + 1
        out.append(Segment(sum(s.count for s in pair), size, compress(body, level), True))
    return out


def _fresh(items: list[Any], raw: bytes, key: str, level: int) -> ListField:
    """A list segmented afresh: encoded and parsed back by chunks of about a segment."""
    seal = seal_size(len(raw))
    per = max(1, len(items) * seal // max(1, len(raw)))
    segments: list[Segment] = []
    parsed: list[Any] = []
    bodies: list[bytes] = []
    for start in range(0, len(items), per):
        chunk = items[start : start + per]
        body = _encode(chunk, f"state.{key}")[1:-1]
        back = loads(b"[" + body + b"]")
        if back != chunk:
            _refuse({key: items})
        parsed.extend(back)
        bodies.append(body)
        segments.append(_segment(len(chunk), body, seal, level))
    if len(segments) > MAX_SEGMENTS:
        segments = _repack(segments, b"[" + b",".join(bodies) + b"]", level)
    return ListField(parsed, raw, tuple(segments))


def _patch(base: Latest, new: Latest, pieces: dict[str, Patch]) -> Patch | None:
    """The patch from ``base`` to ``new`` (lists already grown by ``pieces``), or None
    when the other fields' diff does not rebuild their exact bytes."""
    rest = diff(base.values, new.values) or ["{", {}, []]
    if dumps(apply(base.values, rest)) != _assemble(new.fields, {}):
        return None
    return ["{", {**rest[1], **pieces}, rest[2]]


def _assemble(fields: dict[str, bytes], lists: dict[str, ListField]) -> bytes:
    return b"".join(_pieces(fields, lists))


def _pieces(fields: dict[str, bytes], lists: dict[str, ListField]) -> list[bytes]:
    """The canonical bytes of a state, in pieces: ``{``, each field's key and value in
    key order, ``}``."""
    return object_pieces({**fields, **{k: f.raw for k, f in lists.items()}})


def _digest(
    fields: dict[str, bytes], lists: dict[str, ListField], mark: HashMark | None = None
) -> tuple[str, int, HashMark | None]:
    """The digest and size of the state's canonical bytes, without joining them, and
    its :class:`HashMark`. ``mark``, the base's, when its list is the base's one
    with items appended (or as it was): hashing goes on from it when the pieces
    before that list are the same."""
    pieces = _pieces(fields, lists)
    size = sum(map(len, pieces))
    if not lists:
        return str(hasher(pieces).hexdigest()), size, None
    key = min(lists)
    raw = lists[key].raw
    at = 2 + 2 * sorted({*fields, *lists}).index(key)  # the list's piece: see _pieces
    before = tuple(pieces[:at])
    if mark is not None and mark.key == key and mark.before == before:
        h = mark.hasher.copy()
        h.update(raw[mark.size : -1])  # "," and the appended items (or nothing)
    else:
        h = hasher(before)
        h.update(raw[:-1])
    new_mark = HashMark(key, before, len(raw) - 1, h.copy())
    h.update(b"]")
    for piece in pieces[at + 1 :]:
        h.update(piece)
    return str(h.hexdigest()), size, new_mark


def decode(key: str, sections: Sequence[bytes]) -> Latest:
    """The :class:`Latest` a head's sections hold; errors name ``key``."""
    index, values = _directory(key, sections)
    try:
        lists = _lists(key, index, values, sections[1:])
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptCheckpointError(key, f"malformed state segments: {e}") from e
    fields = {k: dumps(v) for k, v in values.items()}
    return Latest(values, fields, lists, *_digest(fields, lists))


def _directory(key: str, sections: Sequence[bytes]) -> tuple[list[Any], dict[str, Any]]:
    """The segment index and the other fields, checked against the sections."""
    if not sections:
        raise CorruptCheckpointError(key, "head has no directory section")
    directory = _decompress(key, sections[0])
    index = directory.get("s") if isinstance(directory, dict) else None
    values = directory.get("v") if isinstance(directory, dict) else None
    if not isinstance(index, list) or not isinstance(values, dict):
        raise CorruptCheckpointError(key, "malformed state directory")
    if len(index) != len(sections) - 1:
        raise CorruptCheckpointError(key, "state directory does not match the segments")
    return index, values


def _lists(
    key: str, index: list[Any], values: dict[str, Any], packed: Sequence[bytes]
) -> dict[str, ListField]:
    groups: dict[str, list[tuple[int, bytes, bytes]]] = {}
    for (name, count), section in zip(index, packed, strict=True):
        if not isinstance(name, str) or type(count) is not int or count < 1:
            raise ValueError("bad segment entry")
        if name in values:
            raise ValueError(f"{name!r:.40} is both a field and a list")
        groups.setdefault(name, []).append((count, section, _inflate(key, section)))
    lists: dict[str, ListField] = {}
    for name, runs in groups.items():
        items: list[Any] = []
        segments: list[Segment] = []
        for count, section, body in runs:
            got = loads(b"[" + body + b"]")
            if len(got) != count:
                raise ValueError(f"segment of {name!r} holds {len(got)} items, not {count}")
            items.extend(got)
            segments.append(Segment(count, len(body), section, True))
        last = segments[-1]
        segments[-1] = Segment(last.count, last.size, last.packed, False)
        raw = b"[" + b",".join(body for _, _, body in runs) + b"]"
        lists[name] = ListField(items, raw, tuple(segments))
    return lists


def _inflate(key: str, section: bytes) -> bytes:
    try:
        return zlib.decompress(section)
    except zlib.error as e:
        raise CorruptCheckpointError(key, f"undecodable segment: {e}") from e


def _decompress(key: str, section: bytes) -> Any:
    try:
        return loads(_inflate(key, section))
    except (UnicodeDecodeError, ValueError) as e:
        raise CorruptCheckpointError(key, f"undecodable directory: {e}") from e


def decode_data(key: str, sections: Sequence[bytes]) -> dict[str, Any]:
    """Only the state a head's sections hold (the latest load: no digest, no joins)."""
    index, values = _directory(key, sections)
    data = dict(values)
    try:
        for (name, count), section in zip(index, sections[1:], strict=True):
            got = loads(b"[" + _inflate(key, section) + b"]")
            if not isinstance(name, str) or name in values or len(got) != count:
                raise ValueError(f"segment of {name!r:.40} does not hold {count!r:.20} items")
            data.setdefault(name, []).extend(got)
    except (TypeError, ValueError) as e:
        raise CorruptCheckpointError(key, f"malformed state segments: {e}") from e
    return data

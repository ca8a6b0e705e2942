"""What a thread's head and history objects hold, and their one (de)serialization path.

- :class:`Entry`: one checkpoint in the history: a full state (``kind == "full"``) or
  a patch from the previous entry's state, with its id, time, sizes and the digest of
  the state it yields.
- :class:`ObjectRef`: one immutable history object holding the entries of seqs
  ``first..last``, at merge ``level``.
- :class:`Epoch`: a run of history that starts with a full entry; only its objects are
  read to rebuild any of its checkpoints.
- :class:`Manifest`: the index in the head: live checkpoints, epochs, the newest
  entries not yet in an object (``pending``) and keys retired by the last save.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from tulip_memory.delta.codec import (
    KIND_HEAD,
    KIND_LOG,
    KIND_SEGMENTED_HEAD,
    compress,
    decode_frame,
    decode_frame_of,
    decompress_json,
    decompress_json_sized,
    dumps,
    encode_frame,
)
from tulip_memory.delta.diff import tail_items
from tulip_memory.delta.errors import CorruptCheckpointError
from tulip_memory.delta.segments import decode_data

FORMAT = 1
_EPOCH0 = datetime(1970, 1, 1, tzinfo=UTC)

Kind = Literal["full", "delta"]


def to_micros(when: datetime) -> int:
    """Microseconds since the Unix epoch (UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - _EPOCH0) // timedelta(microseconds=1)


def from_micros(micros: int) -> datetime:
    """Inverse of :func:`to_micros`."""
    return _EPOCH0 + timedelta(microseconds=micros)


@dataclass(frozen=True)
class Entry:
    """One checkpoint in the history (its id lives in the manifest, not here).

    ``size`` is the payload's canonical JSON size when known (-1: computed on demand).
    ``replayed``: what replaying the history up to this entry left, kept with it
    (:func:`~tulip_memory.delta.layout.rebuild`; not part of its value).
    """

    seq: int
    created_us: int
    digest: str
    kind: Kind
    payload: Any
    size: int = field(default=-1, compare=False)
    replayed: dict[str, Any] = field(init=False, default_factory=dict, compare=False, repr=False)

    @property
    def raw_size(self) -> int:
        return self.size if self.size >= 0 else len(dumps(self.payload))

    @functools.cached_property
    def list_bytes(self) -> dict[str, bytes]:
        """The canonical bytes (items joined by ``,``) of what this entry gives the
        state's top-level lists: each list of a full entry, and the items a delta
        only appends to a list (:func:`~tulip_memory.delta.diff.tail_items`).
        Computed once and kept with the entry (the history cache keeps entries), so
        that replaying entries can hash a state's lists without encoding them again."""
        payload = self.payload
        if self.kind == "full" and isinstance(payload, dict):
            lists = {k: v for k, v in payload.items() if isinstance(v, list)}
        elif isinstance(payload, list) and len(payload) == 3 and isinstance(payload[1], dict):
            tails = ((k, tail_items(sub)) for k, sub in payload[1].items())
            lists = {k: t[1] for k, t in tails if t is not None}
        else:
            lists = {}
        return {k: dumps(v)[1:-1] for k, v in lists.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "s": self.seq,
            "t": self.created_us,
            "h": self.digest,
            "f" if self.kind == "full" else "d": self.payload,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Entry:
        full = "f" in d
        entry = cls(
            seq=d["s"],
            created_us=d["t"],
            digest=d["h"],
            kind="full" if full else "delta",
            payload=d["f"] if full else d["d"],
        )
        _require(
            isinstance(entry.seq, int)
            and isinstance(entry.created_us, int)
            and isinstance(entry.digest, str),
            "malformed entry",
        )
        return entry


@dataclass(frozen=True)
class ObjectRef:
    """An immutable history object: entries ``first..last`` merged at ``level``."""

    name: str
    level: int
    first: int
    last: int
    size: int

    def to_json(self) -> list[Any]:
        return [self.name, self.level, self.first, self.last, self.size]

    @classmethod
    def from_json(cls, d: Sequence[Any]) -> ObjectRef:
        name, level, first, last, size = d
        _require(isinstance(name, str) and "/" in name and ".." not in name, "bad object name")
        return cls(name=name, level=int(level), first=int(first), last=int(last), size=int(size))


@dataclass(frozen=True)
class Epoch:
    """History from one full entry on; ``closed`` once a later epoch has begun."""

    start: int
    objects: tuple[ObjectRef, ...] = ()
    payload_bytes: int = 0
    closed: bool = False
    started_us: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "started": self.started_us,
            "objects": [o.to_json() for o in self.objects],
            "bytes": self.payload_bytes,
            "closed": self.closed,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Epoch:
        return cls(
            start=int(d["start"]),
            objects=tuple(ObjectRef.from_json(o) for o in d["objects"]),
            payload_bytes=int(d["bytes"]),
            closed=bool(d["closed"]),
            started_us=int(d["started"]),
        )


@dataclass(frozen=True)
class Manifest:
    """The head's index of a thread."""

    next_seq: int = 0
    checkpoints: tuple[tuple[int, str], ...] = ()
    epochs: tuple[Epoch, ...] = ()
    pending: tuple[Entry, ...] = ()
    garbage: tuple[str, ...] = ()
    head_digest: str = ""

    def seq_of(self, checkpoint_id: str) -> int | None:
        """The seq of a live checkpoint, or None."""
        for seq, cid in reversed(self.checkpoints):
            if cid == checkpoint_id:
                return seq
        return None

    @property
    def latest(self) -> tuple[int, str] | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def epoch_of(self, seq: int) -> int:
        """Index of the epoch holding ``seq``."""
        index = 0
        for i, epoch in enumerate(self.epochs):
            if epoch.start <= seq:
                index = i
        return index

    def object_names(self) -> list[str]:
        return [o.name for e in self.epochs for o in e.objects]

    def stored_bytes(self) -> int:
        return sum(o.size for e in self.epochs for o in e.objects)

    def with_epoch(self, index: int, epoch: Epoch) -> Manifest:
        epochs = list(self.epochs)
        epochs[index] = epoch
        return replace(self, epochs=tuple(epochs))

    def to_json(self) -> dict[str, Any]:
        return {"ids": [c for _, c in self.checkpoints], **self.to_json_but_ids()}

    def to_json_but_ids(self) -> dict[str, Any]:
        """:meth:`to_json` without its bulk, the checkpoint ids (see :class:`ManifestEncoder`)."""
        return {
            "format": FORMAT,
            "next": self.next_seq,
            "seqs": _runs(self.checkpoints),
            "epochs": [e.to_json() for e in self.epochs],
            "pending": [e.to_json() for e in self.pending],
            "garbage": list(self.garbage),
            "digest": self.head_digest,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Manifest:
        _require(d.get("format") == FORMAT, f"unknown manifest format {d.get('format')!r}")
        ids = d["ids"]
        seqs = _unruns(d["seqs"], len(ids))
        return cls(
            next_seq=int(d["next"]),
            checkpoints=tuple((int(s), str(c)) for s, c in zip(seqs, ids, strict=True)),
            epochs=tuple(Epoch.from_json(e) for e in d["epochs"]),
            pending=tuple(Entry.from_json(e) for e in d["pending"]),
            garbage=tuple(str(g) for g in d["garbage"]),
            head_digest=str(d["digest"]),
        )


def _runs(checkpoints: Sequence[tuple[int, str]]) -> list[list[int]]:
    """The ascending seqs of ``checkpoints`` as ``[first, count]`` runs (they are
    contiguous but for deletes)."""
    if checkpoints and checkpoints[-1][0] - checkpoints[0][0] == len(checkpoints) - 1:
        return [[checkpoints[0][0], len(checkpoints)]]  # ascending and distinct: one run
    runs: list[list[int]] = []
    for s, _ in checkpoints:
        if runs and runs[-1][0] + runs[-1][1] == s:
            runs[-1][1] += 1
        else:
            runs.append([s, 1])
    return runs


def _unruns(runs: Sequence[Sequence[int]], expected: int) -> list[int]:
    _require(sum(int(count) for _, count in runs) == expected, "seqs and ids differ in length")
    return [int(first) + i for first, count in runs for i in range(int(count))]


def _require(ok: bool, reason: str) -> None:
    if not ok:
        raise ValueError(reason)


@dataclass(frozen=True)
class HeadState:
    """A head's latest state, still compressed: one section (heads written before
    segments) or a directory and segments (:mod:`~tulip_memory.delta.segments`)."""

    sections: tuple[bytes, ...]
    segmented: bool = True


#: The manifest's compressor: runs and Huffman codes only (``Z_RLE``: the ids are random
#: hex, with no repeats for zlib to find; smaller than zlib 1 and faster), a 4 KiB
#: window (runs need one byte of it) and blocks of 2 K symbols, so that a copy of its
#: state (:class:`ManifestEncoder`) is ~40 KB.
_RUNS = (1, zlib.DEFLATED, 12, 5, zlib.Z_RLE)


class ManifestEncoder:
    """A head's manifest section, built on the one a save wrote before.

    Every save rewrites the manifest, whose bulk is the checkpoint ids (20 compressed
    bytes each: 14 KB for 689 checkpoints). The manifest is written ids first
    (``{"ids":[...],...}``; readers take its keys in any order) and the compressor that
    has taken the ids so far is kept with the state a checkpointer caches, so a save
    that adds a checkpoint compresses its id and the small rest of the manifest, not
    every id again. Immutable: each use works on a copy of the compressor's state."""

    def __init__(self, packer: Any, emitted: bytes, checkpoints: tuple[tuple[int, str], ...]):
        self._packer = packer  # has taken '{"ids":[' and the ids of ``checkpoints``
        self._emitted = emitted  # what it gave back meanwhile
        self.checkpoints = checkpoints

    @classmethod
    def start(cls) -> ManifestEncoder:
        packer = zlib.compressobj(*_RUNS)
        return cls(packer, packer.compress(b'{"ids":['), ())

    def covering(self, checkpoints: tuple[tuple[int, str], ...]) -> ManifestEncoder:
        """An encoder that has taken the ids of ``checkpoints``: from this one when they
        extend the ones it took (a save added some), else from the start."""
        done = self.checkpoints
        base = self if checkpoints[: len(done)] == done else ManifestEncoder.start()
        new = checkpoints[len(base.checkpoints) :]
        if not new:
            return base
        text = b",".join(dumps(c) for _, c in new)
        packer = base._packer.copy()
        more = packer.compress(b"," + text if base.checkpoints else text)
        return ManifestEncoder(packer, base._emitted + more, checkpoints)

    def section(self, manifest: Manifest) -> bytes:
        """The compressed section of ``manifest``, whose ids are this encoder's."""
        if manifest.checkpoints != self.checkpoints:
            raise ValueError("the manifest's ids are not the ones this encoder took")
        packer = self._packer.copy()
        rest = dumps(manifest.to_json_but_ids())
        tail: bytes = packer.compress(b"]," + rest[1:]) + packer.flush()
        return self._emitted + tail


def encode_head(manifest: Manifest, state: HeadState, level: int) -> bytes:
    """A head object: the manifest, then the latest state (already compressed)."""
    return encode_head_onto(manifest, state, level, None)[0]


def encode_head_onto(
    manifest: Manifest, state: HeadState, level: int, encoder: ManifestEncoder | None
) -> tuple[bytes, ManifestEncoder | None, bytes]:
    """A head object, the encoder of its manifest for the next save's and the manifest's
    section: built on ``encoder`` where that took a prefix of its ids (else afresh);
    level 0 stores the manifest as it is (no encoder). Any of them reads back the same."""
    kind = KIND_SEGMENTED_HEAD if state.segmented else KIND_HEAD
    if level == 0:
        section, encoder = compress(dumps(manifest.to_json()), 0), None
    else:
        encoder = (encoder or ManifestEncoder.start()).covering(manifest.checkpoints)
        section = encoder.section(manifest)
    return encode_frame(kind, [section, *state.sections]), encoder, section


def decode_head_manifest(
    key: str, data: bytes, known: tuple[bytes, Manifest] | None = None
) -> tuple[Manifest, HeadState]:
    """The manifest of a head object and its still-compressed state; ``known``, a
    manifest section and its manifest (the head a checkpointer wrote last): that
    manifest, not decoded again, when the head's section is those very bytes."""
    manifest_section, state = _head_sections(key, data)
    if known is not None and known[0] == manifest_section:
        return known[1], state
    try:
        manifest = Manifest.from_json(decompress_json(key, manifest_section))
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptCheckpointError(key, f"malformed manifest: {e}") from e
    return manifest, state


def head_manifest_section(key: str, data: bytes) -> bytes:
    """The still-compressed manifest section of a head object."""
    return _head_sections(key, data)[0]


def decode_head_state(key: str, data: bytes) -> dict[str, Any]:
    """The latest state in a head object, without parsing the manifest."""
    return decode_state(key, _head_sections(key, data)[1])


def decode_state(key: str, state: HeadState) -> dict[str, Any]:
    """The state a head holds, in either form."""
    if state.segmented:
        return decode_data(key, state.sections)
    value = decompress_json(key, state.sections[0])
    if not isinstance(value, dict):
        raise CorruptCheckpointError(key, "head state is not an object")
    return value


def _head_sections(key: str, data: bytes) -> tuple[bytes, HeadState]:
    kind, sections = decode_frame_of(key, data, (KIND_SEGMENTED_HEAD, KIND_HEAD))
    if kind == KIND_HEAD and len(sections) != 2:
        raise CorruptCheckpointError(key, f"head has {len(sections)} sections, expected 2")
    if len(sections) < 2:
        raise CorruptCheckpointError(key, f"head has {len(sections)} sections, expected 2+")
    return sections[0], HeadState(tuple(sections[1:]), segmented=kind == KIND_SEGMENTED_HEAD)


def encode_log(entries: Iterable[Entry], level: int) -> bytes:
    """A history object holding ``entries``."""
    return encode_frame(KIND_LOG, [compress(dumps([e.to_json() for e in entries]), level)])


def decode_log(key: str, data: bytes) -> list[Entry]:
    """The entries of a history object; errors name ``key``."""
    return decode_log_sized(key, data)[0]


def decode_log_sized(key: str, data: bytes) -> tuple[list[Entry], int]:
    """The entries of a history object and its canonical JSON size; errors name ``key``."""
    sections = decode_frame(key, data, KIND_LOG)
    if len(sections) != 1:
        raise CorruptCheckpointError(key, f"history object has {len(sections)} sections")
    value, size = decompress_json_sized(key, sections[0])
    try:
        if not isinstance(value, list):
            raise TypeError("not a list of entries")
        return [Entry.from_json(e) for e in value], size
    except (KeyError, TypeError, ValueError) as e:
        raise CorruptCheckpointError(key, f"malformed entries: {e}") from e

"""Pure planning of a thread's history: what an entry stores, what to merge, what to read.

No I/O here: :mod:`tulip_memory.delta.log` reads and writes what these functions plan.
The layout itself is documented in :mod:`tulip_memory.delta`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from tulip_memory.delta.codec import compress, dumps, hasher, object_pieces
from tulip_memory.delta.diff import Patch, PatchError, apply, apply_owned, diff
from tulip_memory.delta.errors import CorruptCheckpointError
from tulip_memory.delta.manifest import (
    Entry,
    Epoch,
    Kind,
    Manifest,
    ObjectRef,
    encode_log,
    from_micros,
)
from tulip_memory.delta.models import CheckpointMetadata
from tulip_memory.delta.segments import Latest

#: An epoch's history may hold this many times the state's size before a snapshot
#: restarts it, so rebuilding an old checkpoint never reads unboundedly more than
#: the state (threads that are truncated or summarised keep growing their history).
READ_AMPLIFICATION = 4
MIN_STATE_BYTES = 4096


@dataclass(frozen=True)
class Policy:
    """How a thread's history is written.

    ``max_chain_depth`` (D) is how many unmerged objects a merge level may hold: the
    newest D deltas wait in the head, and D+1 objects of one level merge into one of
    the next. ``max_chain_depth=0`` stores every save as a full snapshot.
    """

    max_chain_depth: int = 5
    compression_level: int = 6
    max_epoch_age: timedelta | None = None
    read_amplification: int = READ_AMPLIFICATION
    min_state_bytes: int = MIN_STATE_BYTES

    def __post_init__(self) -> None:
        if type(self.max_chain_depth) is not int or self.max_chain_depth < 0:
            raise ValueError(f"max_chain_depth must be an int >= 0, got {self.max_chain_depth!r}")
        if type(self.compression_level) is not int or not -1 <= self.compression_level <= 9:
            raise ValueError(f"compression_level must be 0-9, got {self.compression_level!r}")
        if self.max_epoch_age is not None and self.max_epoch_age <= timedelta(0):
            raise ValueError(f"max_epoch_age must be positive, got {self.max_epoch_age!r}")

    @property
    def fanout(self) -> int:
        return self.max_chain_depth + 1


@dataclass(frozen=True)
class Payload:
    """What an entry stores: the full state or a patch, with its canonical size."""

    kind: Kind
    value: Any
    size: int


@dataclass(frozen=True)
class Step:
    """A manifest after a change, the objects to write for it and the ones it retires."""

    manifest: Manifest
    writes: dict[str, bytes] = field(default_factory=dict)
    retired: tuple[str, ...] = ()


@dataclass(frozen=True)
class Flush:
    """A merge: the pending entries and ``inputs`` become one object at ``level``."""

    level: int
    first: int
    inputs: tuple[ObjectRef, ...]


@dataclass(frozen=True)
class ReadPlan:
    """What to read to rebuild one checkpoint: objects (one round trip) and pending."""

    objects: tuple[ObjectRef, ...]
    pending: tuple[Entry, ...]


def full_payload(new: Latest) -> Payload:
    return Payload("full", new.data, new.size)


def choose_payload(
    manifest: Manifest | None,
    previous: dict[str, Any] | None,
    new: Latest,
    policy: Policy,
    now_us: int,
    patch: Patch | None = None,
) -> Payload:
    """A patch from ``previous`` when it is smaller and allowed, else the full state.

    ``patch``, when given, is already known to rebuild ``new`` exactly from
    ``previous`` (see :mod:`~tulip_memory.delta.segments`); else one is diffed and
    checked against the bytes of ``new``.
    """
    full = full_payload(new)
    epoch = manifest.epochs[-1] if manifest and manifest.epochs else None
    if previous is None or epoch is None or epoch.closed or policy.max_chain_depth == 0:
        return full
    age = policy.max_epoch_age
    if age is not None and now_us - epoch.started_us >= age // timedelta(microseconds=1):
        return full
    exact = patch is not None
    patch = patch or diff(previous, new.data) or ["{", {}, []]
    raw = dumps(patch)
    budget = policy.read_amplification * max(new.size, policy.min_state_bytes)
    if len(raw) >= new.size or epoch.payload_bytes + len(raw) > budget:
        return full
    # diff compares with ==, for which 1, 1.0 and True are alike: check the bytes.
    if not exact and dumps(apply(previous, patch)) != new.raw:
        return full
    return Payload("delta", patch, len(raw))


def make_entry(manifest: Manifest | None, created_us: int, state_digest: str, p: Payload) -> Entry:
    return Entry(
        seq=manifest.next_seq if manifest else 0,
        created_us=created_us,
        digest=state_digest,
        kind=p.kind,
        payload=p.value,
        size=p.size,
    )


def object_name(level: int, first: int, last: int, nonce: str) -> str:
    """Relative name of a history object; the nonce keeps concurrent writers apart."""
    return f"{level}/{first:012d}-{last:012d}-{nonce}"


def append(
    manifest: Manifest | None, entry: Entry, checkpoint_id: str, nonce: str, level: int
) -> Step:
    """``manifest`` with ``entry`` added; a full entry closes the open epoch first."""
    m = manifest or Manifest()
    writes: dict[str, bytes] = {}
    if entry.kind == "full":
        closed = close_epoch(m, nonce, level)
        m, writes = closed.manifest, closed.writes
        m = replace(m, epochs=(*m.epochs, Epoch(start=entry.seq, started_us=entry.created_us)))
    epoch = m.epochs[-1]
    m = m.with_epoch(-1, replace(epoch, payload_bytes=epoch.payload_bytes + entry.raw_size))
    m = replace(
        m,
        next_seq=entry.seq + 1,
        checkpoints=(*m.checkpoints, (entry.seq, checkpoint_id)),
        pending=(*m.pending, entry),
        head_digest=entry.digest,
        garbage=(),
    )
    return Step(m, writes)


def close_epoch(m: Manifest, nonce: str, level: int) -> Step:
    """The open epoch closed, its pending entries written as one (tail) object."""
    if not m.epochs or m.epochs[-1].closed:
        return Step(m)
    epoch = replace(m.epochs[-1], closed=True)
    writes: dict[str, bytes] = {}
    if m.pending:
        ref, data = _object(0, m.pending[0].seq, m.pending[-1].seq, m.pending, nonce, level)
        epoch = replace(epoch, objects=(*epoch.objects, ref))
        writes[ref.name] = data
    return Step(replace(m.with_epoch(-1, epoch), pending=()), writes)


def _object(
    level: int, first: int, last: int, entries: Sequence[Entry], nonce: str, compression: int
) -> tuple[ObjectRef, bytes]:
    data = encode_log(entries, compression)
    name = object_name(level, first, last, nonce)
    return ObjectRef(name=name, level=level, first=first, last=last, size=len(data)), data


def flush_level(count: int, fanout: int) -> int:
    """The highest level whose span divides ``count`` (0: no flush yet)."""
    if fanout == 1:
        return 1
    level = 0
    while count > 0 and count % fanout == 0:
        count //= fanout
        level += 1
    return level


def plan_flush(m: Manifest, fanout: int) -> Flush | None:
    """The merge due after the newest entry, if any: which objects it reads."""
    if not m.pending or not m.epochs or m.epochs[-1].closed:
        return None
    epoch = m.epochs[-1]
    last = m.pending[-1].seq
    level = flush_level(last - epoch.start + 1, fanout)
    if level == 0:
        return None
    first = max(epoch.start, last - fanout**level + 1)
    inputs = tuple(o for o in epoch.objects if o.last >= first)
    first = min([first, *(o.first for o in inputs)])
    return Flush(level=level, first=first, inputs=inputs)


def finish_flush(
    m: Manifest, flush: Flush, input_entries: Iterable[Entry], nonce: str, level: int
) -> Step:
    """The merge done: inputs and pending entries in one new object, inputs retired."""
    entries = sorted([*input_entries, *m.pending], key=lambda e: e.seq)
    ref, data = _object(flush.level, flush.first, entries[-1].seq, entries, nonce, level)
    epoch = m.epochs[-1]
    kept = tuple(o for o in epoch.objects if o not in flush.inputs)
    retired = tuple(o.name for o in flush.inputs)
    m = replace(m.with_epoch(-1, replace(epoch, objects=(*kept, ref))), pending=())
    return Step(replace(m, garbage=retired), {ref.name: data}, retired)


def remove_entry(
    m: Manifest,
    index: int,
    groups: Sequence[tuple[ObjectRef | None, Sequence[Entry]]],
    seq: int,
    replacement: Entry | None,
    nonce: str,
    level: int,
) -> Step:
    """Epoch ``index`` without entry ``seq``, its successor rebased as ``replacement``.

    ``groups`` are the epoch's entries by object (``None`` for the pending ones).
    Objects that change are rewritten under new names (same range) and the old ones
    retired; an epoch left empty disappears.
    """
    epoch = m.epochs[index]
    objects: list[ObjectRef] = []
    writes: dict[str, bytes] = {}
    retired: list[str] = []
    pending = m.pending
    delta_bytes = 0
    for ref, entries in groups:
        kept = [_replace_entry(e, replacement) for e in entries if e.seq != seq]
        delta_bytes += sum(e.raw_size for e in kept) - sum(e.raw_size for e in entries)
        if ref is None:
            pending = tuple(kept)
        elif kept == list(entries):
            objects.append(ref)
        else:
            retired.append(ref.name)
            if kept:
                new_ref, data = _object(ref.level, ref.first, ref.last, kept, nonce, level)
                objects.append(new_ref)
                writes[new_ref.name] = data
    m = replace(
        m,
        checkpoints=tuple(c for c in m.checkpoints if c[0] != seq),
        pending=pending,
        garbage=tuple(retired),
    )
    epochs = list(m.epochs)
    if objects or (pending and index == len(epochs) - 1 and not epoch.closed):
        epochs[index] = replace(
            epoch, objects=tuple(objects), payload_bytes=epoch.payload_bytes + delta_bytes
        )
    else:
        del epochs[index]
    return Step(replace(m, epochs=tuple(epochs)), writes, tuple(retired))


def _replace_entry(entry: Entry, replacement: Entry | None) -> Entry:
    return replacement if replacement is not None and replacement.seq == entry.seq else entry


def read_plan(m: Manifest, seq: int) -> ReadPlan:
    """The objects and pending entries that rebuild checkpoint ``seq``."""
    index = m.epoch_of(seq)
    epoch = m.epochs[index]
    objects = tuple(o for o in epoch.objects if o.first <= seq)
    current = index == len(m.epochs) - 1 and not epoch.closed
    pending = tuple(e for e in m.pending if e.seq <= seq) if current else ()
    return ReadPlan(objects=objects, pending=pending)


def epoch_plan(m: Manifest, index: int) -> ReadPlan:
    """Everything of epoch ``index``."""
    epoch = m.epochs[index]
    current = index == len(m.epochs) - 1 and not epoch.closed
    return ReadPlan(objects=epoch.objects, pending=m.pending if current else ())


def holders(m: Manifest, seqs: Iterable[int]) -> tuple[ObjectRef, ...]:
    """The objects holding any of ``seqs`` (pending entries need none)."""
    wanted = sorted(set(seqs))
    found: list[ObjectRef] = []
    for epoch in m.epochs:
        for o in epoch.objects:
            i = bisect.bisect_left(wanted, o.first)
            if i < len(wanted) and wanted[i] <= o.last:
                found.append(o)
    return tuple(found)


#: A replay keeps the state it reached (its lists' items by reference) with the
#: entry it reached it at, every this many entries and at the end of each object, so
#: rebuilding a later checkpoint from the same cached entries starts from there.
REPLAY_MARK_EVERY = 32


def rebuild(
    sources: Sequence[tuple[str, Entry]], seq: int, *, reused: bool = True
) -> dict[str, Any]:
    """The state of checkpoint ``seq`` from its epoch's entries (keyed by object).

    Raises :class:`CorruptCheckpointError` naming the object at fault: a patch that
    does not apply, a missing entry, or a result that does not match its digest.
    The digest is of the state's canonical bytes, its lists hashed from the bytes of
    the entries that built them (:attr:`Entry.list_bytes`) where those entries only
    appended: a state shares its items with the entries, so a caller that changed
    one in place must be handed a copy (as :meth:`ThreadLog.load` does unless its
    caller only reads the state into objects of its own). The replay
    starts from the latest state an earlier replay kept with an entry up to ``seq``
    (:data:`REPLAY_MARK_EVERY`); the digest checks the result either way. With
    ``reused=False`` (entries read for this rebuild alone, no cache keeps them) it
    keeps nothing with them and encodes the state for its digest.
    """
    ordered = sorted(sources, key=lambda s: s[1].seq)
    start = 0
    for i, (_, entry) in enumerate(ordered):
        if entry.seq > seq:
            break
        if "state" in entry.replayed:
            start = i
    state: Any = None
    owned: set[str] = set()
    runs: dict[str, list[bytes]] | None = {} if reused else None
    target: tuple[str, Entry] | None = None
    if ordered and "state" in ordered[start][1].replayed:
        state, owned, runs = _resume(ordered[start][1].replayed)
        if ordered[start][1].seq == seq:
            target = ordered[start]
        start += 1
    for i in range(start, len(ordered)):
        key, entry = ordered[i]
        if entry.seq > seq:
            break
        state = _step(state, key, entry, owned, runs)
        if entry.seq == seq:
            target = (key, entry)
        elif runs is not None and _marks(ordered, i):
            _keep(entry, state, runs)
    if target is None:
        raise CorruptCheckpointError(sources[-1][0] if sources else "?", f"entry {seq} is missing")
    key, entry = target
    if not isinstance(state, dict) or _digest_of(state, runs or {}) != entry.digest:
        bases = sorted({k for k, _ in sources})
        raise CorruptCheckpointError(
            key, f"rebuilt state does not match its digest (read from {', '.join(bases)})"
        )
    return state


def _marks(ordered: Sequence[tuple[str, Entry]], i: int) -> bool:
    """Whether a replay keeps the state it reached at ``ordered[i]``."""
    last = i + 1 == len(ordered) or ordered[i + 1][0] != ordered[i][0]
    return last or (i + 1) % REPLAY_MARK_EVERY == 0


def _keep(entry: Entry, state: Any, runs: dict[str, list[bytes]]) -> None:
    """The state after ``entry`` kept with it (lists copied: the replay extends its own)."""
    if isinstance(state, dict) and "state" not in entry.replayed:
        kept = {k: list(v) if isinstance(v, list) else v for k, v in state.items()}
        # One assignment: a replay on another thread sees both or neither.
        entry.replayed["state"] = (kept, {k: list(r) for k, r in runs.items()})


def _resume(
    replayed: dict[str, Any],
) -> tuple[dict[str, Any], set[str], dict[str, list[bytes]]]:
    """A replay's state, owned lists and runs from what :func:`_keep` kept."""
    kept: dict[str, Any]
    runs: dict[str, list[bytes]]
    kept, runs = replayed["state"]
    state = {k: list(v) if isinstance(v, list) else v for k, v in kept.items()}
    owned = {k for k, v in state.items() if isinstance(v, list)}
    return state, owned, {k: list(r) for k, r in runs.items()}


def _step(
    state: Any, key: str, entry: Entry, owned: set[str], runs: dict[str, list[bytes]] | None
) -> Any:
    """The state after ``entry``: a copy of a full one, or patched (appends in place,
    onto lists this rebuild made, never onto a payload). ``runs``: the canonical bytes
    of the items of each list built only by appends since the last full entry (None:
    not tracked)."""
    if entry.kind == "full":
        owned.clear()
        if runs is not None:
            runs.clear()
            runs.update({k: [b] if b else [] for k, b in entry.list_bytes.items()})
        return dict(entry.payload) if isinstance(entry.payload, dict) else entry.payload
    if state is None:
        raise CorruptCheckpointError(key, f"entry {entry.seq} is a delta without a base")
    try:
        if isinstance(state, dict):
            appended: set[str] = set()
            state = apply_owned(state, entry.payload, owned, appended)
            if runs is not None:
                _track(runs, entry, appended)
            return state
        if runs is not None:
            runs.clear()
        return apply(state, entry.payload)
    except PatchError as e:
        raise CorruptCheckpointError(key, f"entry {entry.seq}: {e}") from e


def _track(runs: dict[str, list[bytes]], entry: Entry, appended: set[str]) -> None:
    """``runs`` after ``entry``: the lists it appended to grow by its bytes; any other
    key it touched is no longer known by its runs."""
    patch = entry.payload
    if not (isinstance(patch, list) and len(patch) == 3 and patch[0] == "{"):
        runs.clear()  # the whole state replaced
        return
    for k in [*patch[1], *patch[2]]:
        run = runs.get(k)
        if run is not None and k in appended:
            tail = entry.list_bytes.get(k)
            if tail is None:
                del runs[k]
            elif tail:
                run.append(tail)
        else:
            runs.pop(k, None)


def _digest_of(state: dict[str, Any], runs: dict[str, list[bytes]]) -> str:
    """The digest of ``state``'s canonical bytes, its lists with known ``runs`` from
    those, the rest encoded."""
    parts = {
        k: b"[" + b",".join(runs[k]) + b"]" if k in runs and isinstance(v, list) else dumps(v)
        for k, v in state.items()
    }
    return str(hasher(object_pieces(parts)).hexdigest())


def metadata(m: Manifest, entry: Entry, thread_id: str, level: int) -> CheckpointMetadata:
    """The seed's metadata of ``entry``: id, parent and depth come from the manifest,
    sizes from its payload (uncompressed, and compressed alone at ``level``)."""
    seqs = [s for s, _ in m.checkpoints]
    i = bisect.bisect_left(seqs, entry.seq)
    parent = m.checkpoints[i - 1][1] if i > 0 else None
    start = m.epochs[m.epoch_of(entry.seq)].start
    depth = 0 if entry.kind == "full" else i - bisect.bisect_left(seqs, start)
    raw = dumps(entry.payload)
    return CheckpointMetadata(
        checkpoint_id=m.checkpoints[i][1],
        thread_id=thread_id,
        parent_id=parent,
        is_full=entry.kind == "full",
        chain_depth=depth,
        created_at=from_micros(entry.created_us),
        size_bytes=len(raw),
        compressed_size_bytes=len(compress(raw, level)),
    )

"""One thread's history on a :class:`~tulip_memory.delta.storage.DeltaStorage`.

The I/O half of the layout: reads what :mod:`~tulip_memory.delta.layout` plans,
writes what it produces, in this order: history objects, then the head (the commit
point), then deletes of retired objects. A crash between steps leaves unreferenced
objects, never a head that points at nothing.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

from tulip_memory.delta.cache import Cached, LatestCache
from tulip_memory.delta.codec import compress, dumps
from tulip_memory.delta.contracts import ObjectStorage
from tulip_memory.delta.diff import apply, diff
from tulip_memory.delta.errors import CorruptCheckpointError, DeltaStorageError, HeadChanged
from tulip_memory.delta.history import HistoryCache
from tulip_memory.delta.keys import ThreadKeys
from tulip_memory.delta.known import MESSAGES, Known, checkpoint_data, known_after
from tulip_memory.delta.layout import (
    Payload,
    Policy,
    ReadPlan,
    Step,
    append,
    choose_payload,
    epoch_plan,
    finish_flush,
    full_payload,
    holders,
    make_entry,
    metadata,
    plan_flush,
    read_plan,
    rebuild,
    remove_entry,
)
from tulip_memory.delta.manifest import (
    Entry,
    HeadState,
    Manifest,
    ManifestEncoder,
    ObjectRef,
    decode_head_manifest,
    decode_head_state,
    decode_log_sized,
    decode_state,
    encode_head_onto,
    head_manifest_section,
)
from tulip_memory.delta.models import CheckpointMetadata, DeltaCheckpoint
from tulip_memory.delta.segments import Latest, encode
from tulip_memory.delta.segments import decode as decode_latest
from tulip_memory.messages import detached
from tulip_memory.state import AgentState

log = logging.getLogger(__name__)

#: A save computed from the thread's latest state (None: no checkpoint yet): the new
#: state's data and, per top-level list, how many of its first items are the latest
#: state's own objects (see :func:`~tulip_memory.delta.segments.encode`); None for
#: "nothing to save". Called under the thread's write lock, with what the save builds on.
Change: TypeAlias = Callable[
    [dict[str, Any] | None], tuple[dict[str, Any], dict[str, int] | None] | None
]
#: What a save stores: an agent state, its checkpoint data, or a change.
Saved: TypeAlias = "AgentState | dict[str, Any] | Change"

#: A load that finds an object gone (a concurrent save merged it) re-reads the head
#: and tries again, at most this many times.
RACE_RETRIES = 2


@dataclass(frozen=True)
class Head:
    """A decoded head: the manifest, the compressed latest state, the object's size."""

    manifest: Manifest
    state: HeadState
    size: int


@dataclass(frozen=True)
class Stats:
    """What a thread stores: its checkpoints' metadata and its bytes at rest."""

    checkpoints: list[CheckpointMetadata]
    stored_bytes: int
    objects: int
    epochs: int


class _Missing(Exception):
    """An object the manifest names is gone (a race with a merge, or lost)."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(key)


class ThreadLog:
    """The head and history of one thread; ``cache`` keeps latest states between saves,
    ``history`` the history objects read (so an old load again reads only the head)."""

    def __init__(
        self,
        storage: ObjectStorage,
        thread_id: str,
        policy: Policy,
        cache: LatestCache | None = None,
        history: HistoryCache | None = None,
    ) -> None:
        self.storage = storage
        self.keys = ThreadKeys.of(thread_id)
        self.policy = policy
        self.cache = cache
        self.history = history

    @property
    def thread_id(self) -> str:
        return self.keys.thread_id

    # -- reading -----------------------------------------------------------------------

    async def _head_bytes(self) -> bytes | None:
        return (await self.storage.read_objects([self.keys.head])).get(self.keys.head)

    def _decode_head(self, data: bytes) -> tuple[Manifest, HeadState]:
        """A head's manifest (the cached one when the head is the one this process
        wrote last: no decode) and its still-compressed state."""
        entry = self.cache.peek(self.thread_id) if self.cache is not None else None
        known = entry.known_manifest if entry is not None else None
        return decode_head_manifest(self.keys.head, data, known)

    def _written_state(self, data: bytes) -> dict[str, Any] | None:
        """The latest state of head ``data`` from the cache, without decoding it, when
        ``data`` is the head this process wrote last (its manifest section, which
        names the state's digest, is those very bytes); None otherwise."""
        entry = self.cache.peek(self.thread_id) if self.cache is not None else None
        known = entry.known_manifest if entry is not None else None
        if entry is None or known is None:
            return None
        if head_manifest_section(self.keys.head, data) != known[0]:
            return None
        manifest = known[1]
        if manifest.latest != entry.latest or manifest.head_digest != entry.state.digest:
            return None
        return entry.state.data

    async def head(self) -> Head | None:
        """The decoded head, None for a thread with no checkpoints."""
        data = await self._head_bytes()
        if data is None:
            return None
        manifest, state = self._decode_head(data)
        return Head(manifest, state, len(data))

    async def load(
        self, checkpoint_id: str | None = None, *, shared: bool = False
    ) -> dict[str, Any] | None:
        """The state of a checkpoint (the latest if None): 1 round trip, else 2.

        ``shared``: the caller only reads the state, into objects that share none of
        its dicts or lists (``AgentState.from_checkpoint``), so an old checkpoint
        rebuilt from cached entries is handed over without the copy that keeps a caller
        changing it in place from changing them (~1 ms of a warm old load at 689
        turns)."""
        missing = ""
        for _ in range(RACE_RETRIES + 1):
            data = await self._head_bytes()
            if data is None:
                return None
            if checkpoint_id is None:
                written = self._written_state(data) if shared else None
                return written if written is not None else decode_head_state(self.keys.head, data)
            manifest, state = self._decode_head(data)
            seq = manifest.seq_of(checkpoint_id)
            if seq is None:
                return None
            if manifest.latest == (seq, checkpoint_id):
                return decode_state(self.keys.head, state)
            try:
                return await self._rebuild(manifest, seq, shared)
            except _Missing as e:
                missing = e.key
        raise CorruptCheckpointError(missing, "object missing (deleted or never written)")

    async def load_many(
        self, checkpoint_ids: Sequence[str | None]
    ) -> tuple[list[str], dict[str | None, dict[str, Any]]]:
        """The states of several checkpoints (None: the latest) from one read of the
        head, and every checkpoint id in the order saved; ids not found are left out.
        Treat the states as read-only (as ``shared`` loads)."""
        missing = ""
        for _ in range(RACE_RETRIES + 1):
            data = await self._head_bytes()
            if data is None:
                return [], {}
            manifest, state = self._decode_head(data)
            written = self._written_state(data)
            found: dict[str | None, dict[str, Any]] = {}
            try:
                for cid in dict.fromkeys(checkpoint_ids):
                    seq = manifest.latest[0] if cid is None and manifest.latest else None
                    seq = manifest.seq_of(cid) if cid is not None else seq
                    if seq is None:
                        continue
                    latest = manifest.latest is not None and manifest.latest[0] == seq
                    if latest:
                        found[cid] = written or decode_state(self.keys.head, state)
                    else:
                        found[cid] = await self._rebuild(manifest, seq, True)
            except _Missing as e:
                missing = e.key
                continue
            return [cid for _, cid in manifest.checkpoints], found
        raise CorruptCheckpointError(missing, "object missing (deleted or never written)")

    async def _rebuild(self, manifest: Manifest, seq: int, shared: bool) -> dict[str, Any]:
        """Checkpoint ``seq``, from cached objects where it can; when what it rebuilds
        from them fails its digest, read again from storage. Unless ``shared``, the
        state is the caller's own copy: what it was rebuilt from (cached entries)
        cannot change under a caller that changes it in place (a ``marshal`` round
        trip, a third of the cost of encoding it)."""
        plan = read_plan(manifest, seq)
        reused = self._caches_history
        # Entries nothing keeps (no history cache; pending ones are in a cached head's
        # manifest, which the next save writes) make a state that is the caller's.
        own = detached if (reused or plan.pending) and not shared else _same
        try:
            return own(rebuild(await self._sources(plan), seq, reused=reused))
        except CorruptCheckpointError:
            keys = [self.keys.log(r.name) for r in plan.objects]
            if self.history is None or not self.history.forget(keys):
                raise
        return own(rebuild(await self._sources(plan), seq, reused=reused))

    @property
    def _caches_history(self) -> bool:
        """Whether history objects read are kept (so are what replays keep with them)."""
        return self.history is not None and self.history.max_bytes > 0

    async def _sources(self, plan: ReadPlan) -> list[tuple[str, Entry]]:
        groups = await self._groups(plan.objects)
        keyed = ((self.keys.log(ref.name), entries) for ref, entries in groups)
        sources = [(key, e) for key, entries in keyed for e in entries]
        return sources + [(self.keys.head, e) for e in plan.pending]

    async def _groups(self, refs: Sequence[ObjectRef]) -> list[tuple[ObjectRef, list[Entry]]]:
        """The entries of each object: cached, or read in one round trip."""
        keys = [self.keys.log(r.name) for r in refs]
        history = self.history
        pairs = zip(keys, refs, strict=True)
        cached = [history.get(k, r.size) if history else None for k, r in pairs]
        wanted = [k for k, c in zip(keys, cached, strict=True) if c is None]
        got = await self.storage.read_objects(wanted) if wanted else {}
        groups: list[tuple[ObjectRef, list[Entry]]] = []
        for ref, key, entries in zip(refs, keys, cached, strict=True):
            if entries is None:
                data = got.get(key)
                if data is None:
                    raise _Missing(key)
                decoded, weight = decode_log_sized(key, data)
                if history is not None:
                    history.put(key, len(data), decoded, weight)
                entries = tuple(decoded)
            groups.append((ref, list(entries)))
        return groups

    async def _entries(self, manifest: Manifest, seqs: Iterable[int]) -> dict[int, Entry]:
        wanted = set(seqs)
        groups = await self._groups(holders(manifest, wanted))
        found = {e.seq: e for _, entries in groups for e in entries}
        found.update({e.seq: e for e in manifest.pending})
        return {s: found[s] for s in wanted if s in found}

    async def metadata(self, limit: int = 10) -> list[CheckpointMetadata]:
        """Metadata of the newest ``limit`` checkpoints, newest first."""
        return (await self._metadata(limit))[0]

    async def _metadata(self, limit: int) -> tuple[list[CheckpointMetadata], Head | None]:
        for _ in range(RACE_RETRIES + 1):
            head = await self.head()
            if head is None or limit <= 0:
                return [], head
            m = head.manifest
            seqs = [s for s, _ in reversed(m.checkpoints[-limit:])]
            try:
                entries = await self._entries(m, seqs)
            except _Missing:
                continue
            level = self.policy.compression_level
            found = [metadata(m, entries[s], self.thread_id, level) for s in seqs if s in entries]
            return found, head
        raise CorruptCheckpointError(self.keys.head, "history keeps changing under a listing")

    async def stats(self, limit: int = 1000) -> Stats:
        """Metadata of up to ``limit`` checkpoints and the bytes the thread stores."""
        listed, head = await self._metadata(limit)
        if head is None:
            return Stats([], 0, 0, 0)
        m = head.manifest
        objects = sum(len(e.objects) for e in m.epochs)
        return Stats(listed, head.size + m.stored_bytes(), objects + 1, len(m.epochs))

    async def retrieve(self, checkpoint_id: str) -> DeltaCheckpoint | None:
        """One checkpoint's metadata and its own compressed payload."""
        for _ in range(RACE_RETRIES + 1):
            head = await self.head()
            seq = head.manifest.seq_of(checkpoint_id) if head else None
            if head is None or seq is None:
                return None
            try:
                entry = (await self._entries(head.manifest, [seq]))[seq]
            except _Missing:
                continue
            data = compress(dumps(entry.payload), self.policy.compression_level)
            meta = metadata(head.manifest, entry, self.thread_id, self.policy.compression_level)
            return DeltaCheckpoint(metadata=meta, data=data, is_delta=entry.kind == "delta")
        raise CorruptCheckpointError(self.keys.head, "history keeps changing under a read")

    # -- saving ------------------------------------------------------------------------

    async def _head_for_write(
        self,
    ) -> tuple[Head | None, Latest | dict[str, Any] | None, Known | None]:
        """The head, the latest state a save builds on and the messages it was saved
        from when known; unreadable parts are skipped.

        The state is the cached one when the head still names it, else decoded from
        the head (a plain dict from a head written before segments). A corrupt head
        must not stop a save: without a manifest the thread starts over; without a
        readable state the save starts a new epoch with a snapshot.
        """
        try:
            head = await self.head()
        except CorruptCheckpointError as e:
            log.warning("thread %r: %s; starting a fresh history", self.thread_id, e)
            return None, None, None
        if head is None:
            return None, None, None
        m = head.manifest
        cached = self.cache.entry(self.thread_id, m.latest, m.head_digest) if self.cache else None
        if cached is not None:
            return head, cached.state, cached.known
        try:
            if not head.state.segmented:
                return head, decode_state(self.keys.head, head.state), None
            latest = decode_latest(self.keys.head, head.state.sections)
        except CorruptCheckpointError as e:
            log.warning("thread %r: %s; saving a snapshot", self.thread_id, e)
            return head, None, None
        if latest.digest != m.head_digest:
            log.warning("thread %r: head state does not match its digest", self.thread_id)
            return head, None, None
        return head, latest, None

    async def append(self, state: Saved, checkpoint_id: str, created_us: int) -> None:
        """Save ``state`` (an agent state, its checkpoint data, or a :data:`Change` of
        the latest state: nothing is saved when it returns None) as checkpoint
        ``checkpoint_id``, the thread's newest.

        Raises :class:`~tulip_memory.delta.errors.StateNotSerializableError` before
        writing anything when JSON cannot carry the state exactly.

        Onto the head this process wrote last (cached with its version tag, on a
        storage that tags heads) the save reads nothing: it writes the new head only
        if the stored one still has that tag, and otherwise (another writer, a delete)
        takes the path below, which reads the head first. An agent state whose first
        messages are the ones the cached state was saved from encodes only the rest
        (:mod:`~tulip_memory.delta.known`).
        """
        written = self.cache.written(self.thread_id) if self.cache is not None else None
        if written is not None and await self._append_onto(
            written, state, checkpoint_id, created_us
        ):
            return
        head, base, known = await self._head_for_write()
        level = self.policy.compression_level
        found = _state_data(state, known if isinstance(base, Latest) else None, base)
        if found is None:
            return
        data, counts = found
        new = encode(data, base if isinstance(base, Latest) else None, level, counts)
        seq = head.manifest.seq_of(checkpoint_id) if head else None
        if head is not None and seq is not None:
            is_latest = head.manifest.latest == (seq, checkpoint_id)
            if is_latest and head.manifest.head_digest == new.latest.digest:
                return  # the same save again (a retry): nothing to do
            await self.delete_checkpoint(checkpoint_id)  # a new state under an old id
            head, base, known = await self._head_for_write()
            found = _state_data(state, known if isinstance(base, Latest) else None, base)
            if found is None:
                return
            data, counts = found
            new = encode(data, base if isinstance(base, Latest) else None, level, counts)
        manifest = head.manifest if head else None
        previous = base.data if isinstance(base, Latest) else base
        payload = choose_payload(manifest, previous, new.latest, self.policy, created_us, new.patch)
        step = await self._append_step(manifest, new.latest, checkpoint_id, created_us, payload)
        latest = step.manifest.latest
        new_epoch = latest is not None and step.manifest.epochs[-1].start == latest[0]
        sections = HeadState(tuple(new.latest.sections(level)))
        encoder = self._encoder_of(head)
        tag, encoder, section = await self._commit(
            step, sections, manifest, write_name=new_epoch, encoder=encoder
        )
        if self.cache is not None and latest is not None:
            after = _known_after(state, known, counts, new.latest)
            self.cache.put(
                self.thread_id, latest, new.latest, step.manifest, tag, after, encoder, section
            )

    def _encoder_of(self, head: Head | None) -> ManifestEncoder | None:
        """The manifest encoder cached with the state ``head`` names, for the new head's
        manifest to build on (a storage without version tags reads the head before each
        save: without it every save encoded every checkpoint id again, ~540 at 689 turns);
        any other encoder is still only a start, which the new manifest's ids check."""
        if self.cache is None or head is None:
            return None
        m = head.manifest
        cached = self.cache.entry(self.thread_id, m.latest, m.head_digest)
        return cached.encoder if cached is not None else None

    async def append_onto_written(
        self,
        state: AgentState,
        checkpoint_id: str,
        created_us: int,
        *,
        base: str,
        digest: str,
    ) -> bool:
        """Save ``state`` as checkpoint ``checkpoint_id`` only onto the head this process
        wrote last (cached with its version tag), only if that head's latest checkpoint
        is ``base`` and the stored head still has that tag, and only if the state's
        digest is ``digest``; False (nothing read, nothing committed) otherwise, and
        the caller takes a path that reads the head."""
        written = self.cache.written(self.thread_id) if self.cache is not None else None
        if written is None or written.manifest is None or written.manifest.latest is None:
            return False
        if written.manifest.latest[1] != base:
            return False
        return await self._append_onto(written, state, checkpoint_id, created_us, digest)

    async def _append_onto(
        self,
        written: Cached,
        state: Saved,
        checkpoint_id: str,
        created_us: int,
        digest: str | None = None,
    ) -> bool:
        """:meth:`append` onto the cached head, written only if it is still the stored
        one; False (nothing committed) when it is not, for an id already saved, or
        for a state whose digest is not ``digest`` (when given)."""
        manifest, base = written.manifest, written.state
        assert manifest is not None and self.cache is not None
        if manifest.seq_of(checkpoint_id) is not None:
            return False  # a retry or a replacement: the reading path handles those
        level = self.policy.compression_level
        found = _state_data(state, written.known, base)
        if found is None:
            return False  # nothing to save, says a head that may be stale: read it
        data, counts = found
        new = encode(data, base, level, counts)
        if digest is not None and new.latest.digest != digest:
            return False
        payload = choose_payload(
            manifest, base.data, new.latest, self.policy, created_us, new.patch
        )
        step = await self._append_step(manifest, new.latest, checkpoint_id, created_us, payload)
        latest = step.manifest.latest
        new_epoch = latest is not None and step.manifest.epochs[-1].start == latest[0]
        sections = HeadState(tuple(new.latest.sections(level)))
        try:
            tag, encoder, section = await self._commit(
                step,
                sections,
                manifest,
                write_name=new_epoch,
                if_match=written.tag,
                encoder=written.encoder,
            )
        except HeadChanged:
            self.cache.drop(self.thread_id)
            return False
        if latest is not None:
            after = _known_after(state, written.known, counts, new.latest)
            self.cache.put(
                self.thread_id, latest, new.latest, step.manifest, tag, after, encoder, section
            )
        return True

    async def _append_step(
        self,
        manifest: Manifest | None,
        new: Latest,
        checkpoint_id: str,
        created_us: int,
        payload: Payload,
    ) -> Step:
        nonce = secrets.token_hex(4)
        level = self.policy.compression_level
        entry = make_entry(manifest, created_us, new.digest, payload)
        step = append(manifest, entry, checkpoint_id, nonce, level)
        flush = plan_flush(step.manifest, self.policy.fanout)
        if flush is None:
            return step
        try:
            groups = await self._groups(flush.inputs)
        except (CorruptCheckpointError, _Missing) as e:
            if payload.kind == "full":
                raise
            # A merge input is unreadable: save a snapshot instead, in a new epoch;
            # the old epoch keeps the bad object and only its checkpoints fail to load.
            log.warning("thread %r: merge skipped (%s); saving a snapshot", self.thread_id, e)
            full = full_payload(new)
            return await self._append_step(manifest, new, checkpoint_id, created_us, full)
        inputs = [e for _, entries in groups for e in entries]
        merged = finish_flush(step.manifest, flush, inputs, nonce, level)
        return Step(merged.manifest, {**step.writes, **merged.writes}, merged.retired)

    async def _commit(
        self,
        step: Step,
        state: HeadState,
        previous: Manifest | None,
        *,
        write_name: bool,
        if_match: str | None = None,
        encoder: ManifestEncoder | None = None,
    ) -> tuple[str | None, ManifestEncoder | None, bytes]:
        """Objects, then the head, then deletes of what is retired; returns the head's
        version tag (None when the storage has none), its manifest's encoder (built on
        ``encoder``, the one of the head written before, where it can be) and section.

        ``write_name`` (re)writes a hashed thread's name object; saves do it at each
        epoch start, so under age-based lifecycle rules it never expires while the
        thread is active. ``if_match``: the head is written only if it still has that
        tag (:class:`HeadChanged` otherwise, before anything is deleted).
        """
        writes = {self.keys.log(name): data for name, data in step.writes.items()}
        name_key = self.keys.name
        if write_name and name_key is not None:
            writes[name_key] = self.thread_id.encode("utf-8", "surrogatepass")
        if writes:
            await self.storage.write_objects(writes)
        level = self.policy.compression_level
        head, encoder, section = encode_head_onto(step.manifest, state, level, encoder)
        tag = await self.storage.write_head(self.keys.head, head, if_match)
        self._remember({self.keys.log(name): data for name, data in step.writes.items()})
        retired = {*step.retired, *(previous.garbage if previous else ())}
        stale = [self.keys.log(n) for n in sorted(retired)]
        self._forget(stale)
        if stale:
            try:
                await self.storage.delete_objects(stale)
            except DeltaStorageError as e:  # committed already; the next save retries
                log.warning("thread %r: could not delete retired objects: %s", self.thread_id, e)
        return tag, encoder, section

    # -- deleting and copying ----------------------------------------------------------

    async def delete_checkpoint(self, checkpoint_id: str) -> bool:
        """Delete one checkpoint; the next one is rebased on the previous, never orphaned."""
        if self.cache is not None:
            self.cache.drop(self.thread_id)
        head = await self.head()
        seq = head.manifest.seq_of(checkpoint_id) if head else None
        if head is None or seq is None:
            return False
        m = head.manifest
        if len(m.checkpoints) == 1:
            return await self.drop()
        index = m.epoch_of(seq)
        plan = epoch_plan(m, index)
        groups: list[tuple[ObjectRef | None, Sequence[Entry]]] = []
        try:
            groups.extend(await self._groups(plan.objects))
        except _Missing as e:
            raise CorruptCheckpointError(e.key, "object missing") from e
        groups.append((None, plan.pending))
        entries = sorted((e for _, es in groups for e in es), key=lambda e: e.seq)
        states = self._states_around(groups, entries, seq)
        replacement = self._rebased(entries, seq, states)
        nonce = secrets.token_hex(4)
        step = remove_entry(
            m, index, groups, seq, replacement, nonce, self.policy.compression_level
        )
        state = head.state
        if m.latest is not None and m.latest[0] == seq:
            data, state_digest = await self._new_latest(step.manifest, entries, seq, states)
            level = self.policy.compression_level
            state = HeadState(tuple(encode(data, None, level).latest.sections(level)))
            step = replace(step, manifest=replace(step.manifest, head_digest=state_digest))
        await self._commit(step, state, m, write_name=False)
        return True

    def _states_around(
        self,
        groups: Sequence[tuple[ObjectRef | None, Sequence[Entry]]],
        entries: Sequence[Entry],
        seq: int,
    ) -> dict[int, dict[str, Any]]:
        """The states of the entries just before and after ``seq`` in its epoch."""
        i = next(k for k, e in enumerate(entries) if e.seq == seq)
        wanted = [e.seq for e in entries[max(0, i - 1) : i + 2] if e.seq != seq]
        keyed = self._keyed(groups)
        return {s: rebuild(keyed, s) for s in wanted}

    def _keyed(
        self, groups: Sequence[tuple[ObjectRef | None, Sequence[Entry]]]
    ) -> list[tuple[str, Entry]]:
        return [
            (self.keys.log(ref.name) if ref else self.keys.head, e)
            for ref, es in groups
            for e in es
        ]

    def _rebased(
        self, entries: Sequence[Entry], seq: int, states: dict[int, dict[str, Any]]
    ) -> Entry | None:
        """The entry after ``seq``, rewritten to apply to the entry before it."""
        i = next(k for k, e in enumerate(entries) if e.seq == seq)
        if i + 1 >= len(entries):
            return None
        succ = entries[i + 1]
        target = states[succ.seq]
        raw = dumps(target)
        payload = Payload("full", target, len(raw))
        if i > 0:
            patch = diff(states[entries[i - 1].seq], target) or ["{", {}, []]
            praw = dumps(patch)
            exact = dumps(apply(states[entries[i - 1].seq], patch)) == raw
            if len(praw) < len(raw) and exact:
                payload = Payload("delta", patch, len(praw))
        return replace(succ, kind=payload.kind, payload=payload.value, size=payload.size)

    async def _new_latest(
        self,
        m: Manifest,
        entries: Sequence[Entry],
        seq: int,
        states: dict[int, dict[str, Any]],
    ) -> tuple[dict[str, Any], str]:
        """The state and digest of the newest checkpoint once ``seq`` is gone."""
        before = [e for e in entries if e.seq < seq]
        if before:
            return states[before[-1].seq], before[-1].digest
        latest = m.latest
        assert latest is not None  # the caller drops a thread left without checkpoints
        plan = read_plan(m, latest[0])
        try:
            sources = await self._sources(plan)
        except _Missing as e:
            raise CorruptCheckpointError(e.key, "object missing") from e
        target = next(e for _, e in sources if e.seq == latest[0])
        return rebuild(sources, latest[0]), target.digest

    async def drop(self) -> bool:
        """Delete the thread: the head first (it disappears at once), then the rest."""
        if self.cache is not None:
            self.cache.drop(self.thread_id)
        page = await self.storage.list_objects(self.keys.head, limit=1)
        existed = self.keys.head in page.keys
        if existed:
            await self.storage.delete_objects([self.keys.head])
        history = await self.storage.list_all(self.keys.log_prefix)
        rest = history + ([self.keys.name] if self.keys.name else [])
        if rest:
            await self.storage.delete_objects(rest)
        if self.history is not None:
            self.history.forget_prefix(self.keys.log_prefix)
        return existed or bool(history)

    async def replace(self, data: dict[str, Any], checkpoint_id: str, created_us: int) -> None:
        """Make ``data`` the thread's only checkpoint: the new head (one snapshot, no
        history) is written over the old one, the commit point, then every history
        object the old head listed is deleted. A crash in between leaves unreferenced
        objects, never a thread without its new checkpoint."""
        if self.cache is not None:
            self.cache.drop(self.thread_id)
        old = await self.storage.list_all(self.keys.log_prefix)
        level = self.policy.compression_level
        new = encode(data, None, level)
        payload = full_payload(new.latest)
        step = await self._append_step(None, new.latest, checkpoint_id, created_us, payload)
        sections = HeadState(tuple(new.latest.sections(level)))
        await self._commit(step, sections, None, write_name=True)
        fresh = {self.keys.log(name) for name in step.writes}
        stale = [k for k in old if k not in fresh]
        if stale:
            await self.storage.delete_objects(stale)
        if self.history is not None:
            self.history.forget(stale)

    def _remember(self, objects: dict[str, bytes]) -> None:
        """History objects just committed, decoded from their bytes into the history
        cache: a merge soon reads them back (its inputs) and old loads read them."""
        if self.history is None:
            return
        for key, data in objects.items():
            try:
                entries, weight = decode_log_sized(key, data)
            except CorruptCheckpointError as e:  # committed already: only not cached
                log.warning("thread %r: %s", self.thread_id, e)
                continue
            self.history.put(key, len(data), entries, weight)

    def _forget(self, keys: Sequence[str]) -> None:
        """Retired objects out of the history cache (a merge's inputs: never read again)."""
        if self.history is not None and keys:
            self.history.forget(keys)

    async def copy_to(self, dest: ThreadLog) -> bool:
        """Copy this thread to ``dest`` (replacing it): history server-side, then the head."""
        if dest.cache is not None:
            dest.cache.drop(dest.thread_id)
        if dest.keys == self.keys:
            return await self._head_bytes() is not None
        for _ in range(RACE_RETRIES + 1):
            data = await self._head_bytes()
            if data is None:
                return False
            manifest, _ = decode_head_manifest(self.keys.head, data)
            await dest.drop()
            names = manifest.object_names()
            pairs = [(self.keys.log(n), dest.keys.log(n)) for n in names]
            if pairs and await self.storage.copy_objects(pairs):
                continue  # a concurrent save merged some objects away: start over
            if dest.keys.name:
                name = dest.thread_id.encode("utf-8", "surrogatepass")
                await self.storage.write_objects({dest.keys.name: name})
            await self.storage.write_objects({dest.keys.head: data})
            return True
        raise CorruptCheckpointError(self.keys.head, "history keeps changing under a copy")


def _same(state: dict[str, Any]) -> dict[str, Any]:
    return state


def _state_data(
    state: Saved, known: Known | None, base: Latest | dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, int] | None] | None:
    """The checkpoint data of ``state`` and how many of its messages are ``known``'s
    (for :func:`~tulip_memory.delta.segments.encode`); a change is computed from
    ``base``, the latest state (None when it returns None: nothing to save)."""
    if isinstance(state, AgentState):
        return checkpoint_data(state, known)
    if isinstance(state, dict):
        return state, None
    return state(base.data if isinstance(base, Latest) else base)


def _known_after(
    state: Saved,
    known: Known | None,
    counts: dict[str, int] | None,
    latest: Latest,
) -> Known | None:
    """What is known of the messages of ``state`` once saved as ``latest``."""
    field = latest.lists.get(MESSAGES)
    return known_after(state, known, counts, field.items if field is not None else None)

"""The latest states a checkpointer saved, kept so its next save appends to them.

A bounded LRU, in memory, per :class:`~tulip_memory.delta.DeltaCheckpointer`: at most
``max_threads`` threads and ``max_bytes`` of canonical JSON (the parsed values take
a few times that in Python objects; a state larger than ``max_bytes`` is not kept).
An entry is used only when the head read by the save names the same latest
checkpoint (seq and id) with the same digest, so a save by another process, a
delete or a copy in between only costs the next save a decode of the head. An entry
also holds the messages its state was saved from (the caller's objects, kept alive
while cached: their size is about the state's), so the next save encodes only the
messages after them (:mod:`~tulip_memory.delta.known`).
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Self

from tulip_memory.delta.known import Known
from tulip_memory.delta.manifest import Manifest
from tulip_memory.delta.segments import Latest

#: Defaults: 64 threads, 16 MiB of canonical JSON.
MAX_THREADS = 64
MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Cached:
    """A saved latest state and the checkpoint it is: ``(seq, checkpoint id)``; with
    the manifest and version tag of the head written with it, when the storage tags
    heads (then the next save needs no read of the head)."""

    latest: tuple[int, str]
    state: Latest
    manifest: Manifest | None = None
    tag: str | None = None
    #: The messages that state was saved from (:mod:`~tulip_memory.delta.known`).
    known: Known | None = None


class Scoped:
    """A cache with views: :meth:`scoped` gives one for another namespace of keys (a
    tenant's) on the same entries and bounds, so any number of views stay within one
    budget."""

    _scope = ""

    def scoped(self, scope: str) -> Self:
        """A view of this cache for another namespace of keys (length-prefixed, so no
        two scopes share a key)."""
        view = copy.copy(self)
        view._scope = f"{self._scope}{len(scope)}:{scope}\x1f"
        return view


class LatestCache(Scoped):
    """Latest states by thread id, least recently used first out (views for other
    namespaces of thread ids: :meth:`~Scoped.scoped`)."""

    def __init__(self, max_threads: int = MAX_THREADS, max_bytes: int = MAX_BYTES) -> None:
        if max_threads < 0 or max_bytes < 0:
            raise ValueError("cache bounds must be >= 0")
        self._shared = _Entries(max_threads, max_bytes)

    @property
    def max_threads(self) -> int:
        return self._shared.max_threads

    @property
    def max_bytes(self) -> int:
        return self._shared.max_bytes

    def __len__(self) -> int:
        return len(self._shared.entries)

    @property
    def bytes(self) -> int:
        return self._shared.bytes

    def get(self, thread_id: str, latest: tuple[int, str] | None, digest: str) -> Latest | None:
        """The state cached for ``thread_id`` if it is that checkpoint, else None."""
        entry = self.entry(thread_id, latest, digest)
        return None if entry is None else entry.state

    def entry(self, thread_id: str, latest: tuple[int, str] | None, digest: str) -> Cached | None:
        """The entry of ``thread_id`` if it holds that checkpoint, else None."""
        key = self._scope + thread_id
        with self._shared.lock:
            entry = self._shared.entries.get(key)
            if entry is None or entry.latest != latest or entry.state.digest != digest:
                return None
            self._shared.entries.move_to_end(key)
            return entry

    def written(self, thread_id: str) -> Cached | None:
        """The entry of ``thread_id`` when it holds the head this process wrote (tagged)."""
        key = self._scope + thread_id
        with self._shared.lock:
            entry = self._shared.entries.get(key)
            if entry is None or entry.tag is None or entry.manifest is None:
                return None
            self._shared.entries.move_to_end(key)
            return entry

    def put(
        self,
        thread_id: str,
        latest: tuple[int, str],
        state: Latest,
        manifest: Manifest | None = None,
        tag: str | None = None,
        known: Known | None = None,
    ) -> None:
        shared = self._shared
        with shared.lock:
            shared.pop(self._scope + thread_id)
            if state.size > shared.max_bytes or shared.max_threads == 0:
                return
            entry = Cached(latest, state, manifest, tag, known)
            shared.entries[self._scope + thread_id] = entry
            shared.bytes += state.size
            while len(shared.entries) > shared.max_threads or shared.bytes > shared.max_bytes:
                _, old = shared.entries.popitem(last=False)
                shared.bytes -= old.state.size

    def drop(self, thread_id: str) -> None:
        with self._shared.lock:
            self._shared.pop(self._scope + thread_id)


class _Entries:
    """What the views of one cache share."""

    def __init__(self, max_threads: int, max_bytes: int) -> None:
        self.max_threads = max_threads
        self.max_bytes = max_bytes
        self.entries: OrderedDict[str, Cached] = OrderedDict()
        self.bytes = 0
        self.lock = threading.Lock()  # checkpointers may be shared by threads

    def pop(self, key: str) -> None:
        old = self.entries.pop(key, None)
        if old is not None:
            self.bytes -= old.state.size

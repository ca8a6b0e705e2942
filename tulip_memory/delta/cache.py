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

import builtins
import copy
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, Self, TypeVar

from tulip_memory.delta.known import Known
from tulip_memory.delta.manifest import Manifest, ManifestEncoder
from tulip_memory.delta.segments import Latest

#: Defaults: 64 threads, 16 MiB of canonical JSON.
MAX_THREADS = 64
MAX_BYTES = 16 * 1024 * 1024

V = TypeVar("V")


class Lru(Generic[V]):
    """Values by key, least recently used first out, within ``max_bytes`` (each value
    weighing ``weight(value)``) and ``max_items``: what the views of one cache share.
    A value heavier than ``max_bytes`` is not kept. Thread-safe; ``lock`` (reentrant)
    makes a check and its :meth:`touch` one step."""

    def __init__(
        self, max_bytes: int, weight: Callable[[V], int], max_items: int | None = None
    ) -> None:
        if max_bytes < 0 or (max_items is not None and max_items < 0):
            raise ValueError("cache bounds must be >= 0")
        self.max_bytes = max_bytes
        self.max_items = max_items
        self.bytes = 0
        self.lock = threading.RLock()  # checkpointers may be shared by threads
        self._weight = weight
        self._values: OrderedDict[str, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        with self.lock:
            return key in self._values

    def __iter__(self) -> Iterator[str]:
        """The keys, as a list taken now (least recently used first)."""
        with self.lock:
            return iter(list(self._values))

    def peek(self, key: str) -> V | None:
        """The value at ``key``, without making it recently used."""
        with self.lock:
            return self._values.get(key)

    def touch(self, key: str) -> None:
        """Make ``key`` the most recently used."""
        with self.lock:
            self._values.move_to_end(key)

    def put(self, key: str, value: V) -> None:
        with self.lock:
            self.pop(key)
            weight = self._weight(value)
            if weight > self.max_bytes or self.max_items == 0:
                return
            self._values[key] = value
            self.bytes += weight
            while self.bytes > self.max_bytes or (
                self.max_items is not None and len(self._values) > self.max_items
            ):
                _, old = self._values.popitem(last=False)
                self.bytes -= self._weight(old)

    def pop(self, key: str) -> bool:
        """Drop ``key``; whether it was there."""
        with self.lock:
            old = self._values.pop(key, None)
            if old is None:
                return False
            self.bytes -= self._weight(old)
            return True


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
    #: The head's manifest section so far, for the next save's to build on (its ids
    #: compressed, ~20 bytes each, and a ~40 KB compressor state: not in the weight).
    encoder: ManifestEncoder | None = None
    #: The compressed manifest section of that head (~20 bytes per checkpoint: not in
    #: the weight), so a load that reads the same head does not decode it again.
    section: bytes | None = None

    @property
    def known_manifest(self) -> tuple[bytes, Manifest] | None:
        """The manifest section of the head written with this state, and its manifest."""
        if self.section is None or self.manifest is None:
            return None
        return self.section, self.manifest


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
        self._shared: Lru[Cached] = Lru(max_bytes, lambda e: e.state.size, max_threads)

    @property
    def max_threads(self) -> int:
        return self._shared.max_items or 0

    @property
    def max_bytes(self) -> int:
        return self._shared.max_bytes

    def __len__(self) -> int:
        return len(self._shared)

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
            entry = self._shared.peek(key)
            if entry is None or entry.latest != latest or entry.state.digest != digest:
                return None
            self._shared.touch(key)
            return entry

    def written(self, thread_id: str) -> Cached | None:
        """The entry of ``thread_id`` when it holds the head this process wrote (tagged)."""
        key = self._scope + thread_id
        with self._shared.lock:
            entry = self._shared.peek(key)
            if entry is None or entry.tag is None or entry.manifest is None:
                return None
            self._shared.touch(key)
            return entry

    def put(
        self,
        thread_id: str,
        latest: tuple[int, str],
        state: Latest,
        manifest: Manifest | None = None,
        tag: str | None = None,
        known: Known | None = None,
        encoder: ManifestEncoder | None = None,
        section: builtins.bytes | None = None,  # the property below shadows bytes
    ) -> None:
        entry = Cached(latest, state, manifest, tag, known, encoder, section)
        self._shared.put(self._scope + thread_id, entry)

    def peek(self, thread_id: str) -> Cached | None:
        """The entry of ``thread_id``, whichever checkpoint it holds (not made recent)."""
        return self._shared.peek(self._scope + thread_id)

    def drop(self, thread_id: str) -> None:
        self._shared.pop(self._scope + thread_id)

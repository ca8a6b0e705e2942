"""The last state a producer published per thread: what its next delta builds on.

A bounded LRU in memory, per :class:`~tulip_producer.Producer`: at most
``max_threads`` threads (default 256) and ``max_bytes`` of canonical JSON (default 32
MiB; the parsed values take a few times that in Python objects). A state larger than
``max_bytes`` is not kept: that thread's saves go whole. An entry missing (first save,
a restarted process, an evicted thread) only means the next save sends the full
state, which every reader and worker can use without a base. An entry also holds the
messages its state was made from (the caller's objects, kept alive while cached), so
the next save of an agent state encodes only the messages after them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from tulip_memory.delta.known import Known
from tulip_wire.statedelta import Snapshot, footprint

MAX_THREADS = 256
MAX_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class Published:
    """A thread's last published checkpoint: its id and state, and the messages it
    was made from when it was an agent state (:mod:`tulip_memory.delta.known`)."""

    checkpoint_id: str
    snapshot: Snapshot
    known: Known | None = None


class PublishedBases:
    """Last published states by thread key, least recently used first out."""

    def __init__(self, max_threads: int = MAX_THREADS, max_bytes: int = MAX_BYTES) -> None:
        if max_threads < 0 or max_bytes < 0:
            raise ValueError("cache bounds must be >= 0")
        self.max_threads = max_threads
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, Published] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, key: str) -> Published | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(
        self, key: str, checkpoint_id: str, snapshot: Snapshot, known: Known | None = None
    ) -> None:
        with self._lock:
            self._pop(key)
            size = footprint(snapshot)
            if size > self.max_bytes or self.max_threads == 0:
                return
            self._entries[key] = Published(checkpoint_id, snapshot, known)
            self._bytes += size
            while len(self._entries) > self.max_threads or self._bytes > self.max_bytes:
                _, old = self._entries.popitem(last=False)
                self._bytes -= footprint(old.snapshot)

    def drop(self, key: str) -> None:
        with self._lock:
            self._pop(key)

    def drop_prefix(self, prefix: str) -> None:
        """Every thread whose key starts with ``prefix`` (a tenant's, on its erase)."""
        with self._lock:
            for key in [k for k in self._entries if k.startswith(prefix)]:
                self._pop(key)

    def _pop(self, key: str) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= footprint(old.snapshot)

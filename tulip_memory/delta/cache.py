"""The latest states a checkpointer saved, kept so its next save appends to them.

A bounded LRU, in memory, per :class:`~tulip_memory.delta.DeltaCheckpointer`: at most
``max_threads`` threads and ``max_bytes`` of canonical JSON (the parsed values take
a few times that in Python objects; a state larger than ``max_bytes`` is not kept).
An entry is used only when the head read by the save names the same latest
checkpoint (seq and id) with the same digest, so a save by another process, a
delete or a copy in between only costs the next save a decode of the head.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from tulip_memory.delta.segments import Latest

#: Defaults: 64 threads, 16 MiB of canonical JSON.
MAX_THREADS = 64
MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Cached:
    """A saved latest state and the checkpoint it is: ``(seq, checkpoint id)``."""

    latest: tuple[int, str]
    state: Latest


class LatestCache:
    """Latest states by thread id, least recently used first out."""

    def __init__(self, max_threads: int = MAX_THREADS, max_bytes: int = MAX_BYTES) -> None:
        if max_threads < 0 or max_bytes < 0:
            raise ValueError("cache bounds must be >= 0")
        self.max_threads = max_threads
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, Cached] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, thread_id: str, latest: tuple[int, str] | None, digest: str) -> Latest | None:
        """The state cached for ``thread_id`` if it is that checkpoint, else None."""
        entry = self._entries.get(thread_id)
        if entry is None or entry.latest != latest or entry.state.digest != digest:
            return None
        self._entries.move_to_end(thread_id)
        return entry.state

    def put(self, thread_id: str, latest: tuple[int, str], state: Latest) -> None:
        self.drop(thread_id)
        if state.size > self.max_bytes or self.max_threads == 0:
            return
        self._entries[thread_id] = Cached(latest, state)
        self._bytes += state.size
        while len(self._entries) > self.max_threads or self._bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.state.size

    def drop(self, thread_id: str) -> None:
        old = self._entries.pop(thread_id, None)
        if old is not None:
            self._bytes -= old.state.size

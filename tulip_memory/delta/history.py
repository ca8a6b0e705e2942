"""History objects a checkpointer has read or written, kept decoded, so that loading an
old checkpoint again reads only the head, and a merge does not read back the objects it
merges (its inputs are the objects the same writer wrote shortly before).

History objects are immutable: a name (level, range and a random nonce, see
:func:`~tulip_memory.delta.layout.object_name`) is written once and never rewritten
(a rewrite takes a new nonce), so a cached object is used as long as the manifest
still names it with the size it was read at; nothing else is checked before use. What
is rebuilt from cached objects is still checked against the digest saved with the
checkpoint, and a mismatch reads the objects again from storage. No caller can
change cached entries through a load: ``ThreadLog.load`` hands out a copy, and the
checkpointer's ``AgentState`` shares no dict or list with what it was built from.

A bounded LRU, in memory, per :class:`~tulip_memory.delta.DeltaCheckpointer`: at most
``max_bytes`` of canonical JSON (default 8 MiB; the parsed entries take a few times
that in Python objects, and an entry once replayed also keeps the bytes of the items
it appends, :attr:`~tulip_memory.delta.manifest.Entry.list_bytes`, about its share of
that JSON again, and every :data:`~tulip_memory.delta.layout.REPLAY_MARK_EVERY`-th
entry and the last of each object the state a replay reached there, its lists by
reference: 8 bytes an item, and items of objects since evicted stay alive with it;
an object larger than ``max_bytes`` is not kept).
:meth:`~tulip_memory.delta.cache.Scoped.scoped` gives a view for another namespace
of keys (a tenant's) within the same budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tulip_memory.delta.cache import Lru, Scoped
from tulip_memory.delta.manifest import Entry

#: Default bound: 8 MiB of canonical JSON.
MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class _Object:
    size: int  # the object's stored bytes, as the manifest names it
    entries: tuple[Entry, ...]
    weight: int  # its canonical JSON bytes


class HistoryCache(Scoped):
    """Decoded history objects by storage key, least recently used first out (views
    for other namespaces of keys: :meth:`~tulip_memory.delta.cache.Scoped.scoped`)."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._shared: Lru[_Object] = Lru(max_bytes, lambda o: o.weight)

    @property
    def max_bytes(self) -> int:
        return self._shared.max_bytes

    @property
    def bytes(self) -> int:
        return self._shared.bytes

    def __len__(self) -> int:
        return len(self._shared)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._scope + key in self._shared

    def get(self, key: str, size: int) -> tuple[Entry, ...] | None:
        """The entries of the object at ``key`` if it was read at ``size`` bytes."""
        with self._shared.lock:
            found = self._shared.peek(self._scope + key)
            if found is None or found.size != size:
                return None
            self._shared.touch(self._scope + key)
            return found.entries

    def put(self, key: str, size: int, entries: Sequence[Entry], weight: int) -> None:
        """Keep the entries of the object at ``key`` (``size`` stored bytes, ``weight``
        bytes of canonical JSON)."""
        self._shared.put(self._scope + key, _Object(size, tuple(entries), weight))

    def forget(self, keys: Iterable[str]) -> bool:
        """Drop ``keys``; whether any was cached."""
        return any([self._shared.pop(self._scope + k) for k in keys])

    def forget_prefix(self, prefix: str) -> None:
        """Drop every key starting with ``prefix`` (a deleted thread's history)."""
        start = self._scope + prefix
        with self._shared.lock:
            for key in [k for k in self._shared if k.startswith(start)]:
                self._shared.pop(key)

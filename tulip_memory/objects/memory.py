"""Objects in this process (tests, development): a dict of bytes by key.

:meth:`MemoryObjectStore.named` gives every store of one name the same objects, as
``memory://name`` claim-check URLs need; a plain ``MemoryObjectStore()`` has its own.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tulip_memory.objects.base import ObjectInfo, ObjectPage

_SPACES: dict[str, dict[str, bytes]] = {}
#: One lock for every store: named ones share their dicts across threads.
_LOCK = threading.Lock()


class MemoryObjectStore:
    """Objects by key in a dict; calls never block, so async callers make them inline."""

    blocking = False

    def __init__(self, objects: dict[str, bytes] | None = None) -> None:
        self._objects = {} if objects is None else objects

    @classmethod
    def named(cls, name: str) -> MemoryObjectStore:
        """A store on the process-wide objects called ``name``."""
        with _LOCK:
            return cls(_SPACES.setdefault(name, {}))

    def get(self, key: str, limit: int | None = None) -> bytes | None:
        with _LOCK:
            data = self._objects.get(key)
        return None if data is None else data[:limit]

    def put(self, key: str, data: bytes, *, if_match: str | None = None) -> str | None:
        with _LOCK:
            self._objects[key] = bytes(data)
        return None

    def delete(self, keys: Sequence[str]) -> None:
        with _LOCK:
            for key in keys:
                self._objects.pop(key, None)

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> ObjectPage:
        after = start_after or ""
        with _LOCK:
            found = [(k, len(v)) for k, v in self._objects.items() if k.startswith(prefix)]
        page = [ObjectInfo(k, size) for k, size in sorted(found) if k > after]
        return ObjectPage(objects=tuple(page[:limit]), truncated=len(page) > limit)

    def copy(self, source: str, dest: str) -> bool:
        with _LOCK:
            data = self._objects.get(source)
            if data is not None:
                self._objects[dest] = data
        return data is not None

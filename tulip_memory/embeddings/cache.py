"""A bounded LRU of encodings keyed by (tenant, model, text).

The tenant is part of the key so an entry is only ever reused by the tenant that
computed it: the cache is not a surface two tenants share.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from tulip_memory.embeddings.base import Vectors

CacheKey = tuple[str, str, str]


class EmbeddingCache:
    """Thread-safe LRU; ``maxsize=0`` disables it."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 0:
            raise ValueError(f"maxsize must be >= 0, got {maxsize}")
        self.maxsize = maxsize
        self._data: OrderedDict[CacheKey, Vectors | None] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: CacheKey) -> tuple[bool, Vectors | None]:
        """``(found, vector)``; a cached ``None`` means "text has no encoding"."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return True, self._data[key]
            self.misses += 1
            return False, None

    def put(self, key: CacheKey, vector: Vectors | None) -> None:
        if self.maxsize == 0:
            return
        with self._lock:
            self._data[key] = vector
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

"""In-process delta storage: a dict of objects (tests, development)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tulip_memory.delta.storage import DeltaStorage, ObjectInfo, ObjectPage


class InMemoryDeltaStorage(DeltaStorage):
    """In-memory storage for delta checkpoints (for testing)."""

    def __init__(self) -> None:
        self._objects: dict[str, bytes] = {}

    async def read_objects(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        return {k: self._objects.get(k) for k in keys}

    async def write_objects(self, objects: Mapping[str, bytes]) -> None:
        self._objects.update({k: bytes(v) for k, v in objects.items()})

    async def delete_objects(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._objects.pop(key, None)

    async def list_objects(
        self, prefix: str, *, start_after: str | None = None, limit: int = 1000
    ) -> ObjectPage:
        after = start_after or ""
        keys = sorted(k for k in self._objects if k.startswith(prefix) and k > after)
        page = tuple(ObjectInfo(k, len(self._objects[k])) for k in keys[:limit])
        return ObjectPage(objects=page, truncated=len(keys) > limit)

    async def copy_objects(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        missing = [s for s, _ in pairs if s not in self._objects]
        for source, dest in pairs:
            if source in self._objects:
                self._objects[dest] = self._objects[source]
        return missing

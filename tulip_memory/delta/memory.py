"""In-process delta storages (tests, development).

:class:`InMemoryDeltaStorage` is the seed's: a dict of the records it is given, kept
as given (the checkpointer chains deltas on top, see :mod:`tulip_memory.delta.records`).
:class:`InMemoryObjectStorage` is a dict of objects under the layout of
:mod:`tulip_memory.delta`, what the S3 and file storages store, in memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tulip_memory.delta.models import CheckpointMetadata, DeltaCheckpoint
from tulip_memory.delta.storage import DeltaStorage, ObjectInfo, ObjectPage, ThreadPage


class InMemoryObjectStorage(DeltaStorage):
    """Objects by key in a dict: the layout of :mod:`tulip_memory.delta`, in memory."""

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


class InMemoryDeltaStorage(InMemoryObjectStorage):
    """In-memory storage for delta checkpoints (for testing).

    ``store`` keeps the record it is given under its thread and id (storing an id again
    replaces it and makes it the newest); ``retrieve`` returns it; ``list_checkpoints``
    is newest first. Other objects (a thread's summary) go to the object methods.
    """

    def __init__(self) -> None:
        super().__init__()
        self._storage: dict[str, dict[str, DeltaCheckpoint]] = {}

    async def store(self, thread_id: str, checkpoint_id: str, checkpoint: DeltaCheckpoint) -> None:
        records = self._storage.setdefault(thread_id, {})
        records.pop(checkpoint_id, None)  # re-stored: the newest again
        records[checkpoint_id] = checkpoint

    async def retrieve(self, thread_id: str, checkpoint_id: str) -> DeltaCheckpoint | None:
        return self._storage.get(thread_id, {}).get(checkpoint_id)

    async def list_checkpoints(self, thread_id: str, limit: int = 10) -> list[CheckpointMetadata]:
        records = list(self._storage.get(thread_id, {}).values())
        return [r.metadata for r in reversed(records)][: max(limit, 0)]

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        records = self._storage.get(thread_id)
        if records is None:
            return False
        if checkpoint_id is None:
            del self._storage[thread_id]
            return True
        found = records.pop(checkpoint_id, None) is not None
        if not records:
            del self._storage[thread_id]
        return found

    async def list_threads_page(
        self, page_size: int = 100, page_token: str | None = None
    ) -> ThreadPage:
        ids = sorted(t for t in self._storage if page_token is None or t > page_token)
        page = tuple(ids[:page_size])
        token = page[-1] if len(ids) > page_size else None
        return ThreadPage(thread_ids=page, next_page_token=token)

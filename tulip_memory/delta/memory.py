"""The seed's in-process delta storage (tests, development).

:class:`InMemoryDeltaStorage` is a dict of the records it is given, kept as given (the
checkpointer chains deltas on top, see :mod:`tulip_memory.delta.records`); its object
methods (a thread's summary) are :class:`~tulip_memory.delta.objects.InMemoryObjectStorage`'s.
"""

from __future__ import annotations

from tulip_memory.delta.models import CheckpointMetadata, DeltaCheckpoint
from tulip_memory.delta.objects import InMemoryObjectStorage
from tulip_memory.delta.storage import ThreadPage


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

"""What a thread's history asks of its storage: the two contracts of
:class:`~tulip_memory.delta.storage.DeltaStorage`, as the parts that use them see them.

:class:`~tulip_memory.delta.log.ThreadLog` works over the object contract and
:mod:`~tulip_memory.delta.records` over the seed's record contract; both take any
:class:`DeltaStorage`, which implements these structurally. Kept here, with nothing of
the storage imported, so the storage can build both without their importing it back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from tulip_memory.delta.models import CheckpointMetadata, DeltaCheckpoint
from tulip_memory.objects import ObjectPage


class ObjectStorage(Protocol):
    """Bytes by key: the object contract, with the helpers built on it."""

    async def read_objects(self, keys: Sequence[str]) -> dict[str, bytes | None]: ...

    async def write_objects(self, objects: Mapping[str, bytes]) -> None: ...

    async def delete_objects(self, keys: Sequence[str]) -> None: ...

    async def list_objects(
        self, prefix: str, *, start_after: str | None = None, limit: int = 1000
    ) -> ObjectPage: ...

    async def list_all(self, prefix: str) -> list[str]: ...

    async def write_head(
        self, key: str, data: bytes, if_match: str | None = None
    ) -> str | None: ...

    async def copy_objects(self, pairs: Sequence[tuple[str, str]]) -> list[str]: ...


class RecordStorage(Protocol):
    """Whole :class:`DeltaCheckpoint` records by thread and id: the seed's contract."""

    async def store(
        self, thread_id: str, checkpoint_id: str, checkpoint: DeltaCheckpoint
    ) -> None: ...

    async def retrieve(self, thread_id: str, checkpoint_id: str) -> DeltaCheckpoint | None: ...

    async def list_checkpoints(
        self, thread_id: str, limit: int = 10
    ) -> list[CheckpointMetadata]: ...

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool: ...

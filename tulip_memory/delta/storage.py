"""The storage contract of delta checkpointing (:class:`DeltaStorage`).

A backend implements one of two contracts:

- the **object contract** (this project's): five byte-level operations, no more: read
  objects by key (one round trip: their GETs run concurrently), write, delete, list by
  prefix (paginated) and copy (server-side where the backend can). Everything the
  seed's contract does (``store``, ``retrieve``, ``list_checkpoints``, ``delete``) and
  the thread lifecycle (``list_threads``, ``copy_thread``) is built once, here, on
  those five, over the layout of :mod:`tulip_memory.delta`, so every such backend
  stores the same objects and passes the same conformance suite (the file, S3 and
  in-memory backends are one :mod:`tulip_memory.objects` store each, through
  :mod:`tulip_memory.delta.objects`);
- the **record contract** (the seed's): ``store`` / ``retrieve`` /
  ``list_checkpoints`` / ``delete`` of whole :class:`DeltaCheckpoint` records, kept as
  given. :class:`DeltaCheckpointer` then does the seed's delta chaining on top (see
  :mod:`tulip_memory.delta.records`). Listing threads needs ``list_threads_page``
  (optional); ``copy_thread`` works on the four.

A subclass implementing neither completely cannot be instantiated (``TypeError``).
"""

from __future__ import annotations

import zlib
from abc import ABC
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from tulip_memory.delta.codec import loads
from tulip_memory.delta.diff import PatchError, apply
from tulip_memory.delta.errors import CorruptCheckpointError
from tulip_memory.delta.keys import HEADS, head_key_thread
from tulip_memory.delta.layout import Policy
from tulip_memory.delta.log import ThreadLog
from tulip_memory.delta.manifest import to_micros
from tulip_memory.delta.models import CheckpointMetadata, DeltaCheckpoint
from tulip_memory.delta.records import copy_records
from tulip_memory.objects import ObjectPage

#: The seed's abstract methods, and this project's.
RECORD_METHODS = ("store", "retrieve", "list_checkpoints", "delete")
OBJECT_METHODS = ("read_objects", "write_objects", "delete_objects", "list_objects")


@dataclass(frozen=True)
class ThreadPage:
    """One page of thread ids; pass ``next_page_token`` for the next (None: the last)."""

    thread_ids: tuple[str, ...]
    next_page_token: str | None


class DeltaStorage(ABC):  # noqa: B024 - abstract through one of two contracts, see __new__
    """Abstract storage backend for delta checkpoints."""

    def __new__(cls, *args: object, **kwargs: object) -> DeltaStorage:
        if not (_implements(cls, RECORD_METHODS) or _implements(cls, OBJECT_METHODS)):
            raise TypeError(
                f"Can't instantiate abstract class {cls.__name__}: implement the record "
                f"contract ({', '.join(RECORD_METHODS)}) or the object contract "
                f"({', '.join(OBJECT_METHODS)})"
            )
        return super().__new__(cls)

    @property
    def uses_layout(self) -> bool:
        """Whether checkpoints go through this package's layout (the object contract);
        False when the storage implements the seed's record methods itself."""
        return not _implements(type(self), RECORD_METHODS)

    # -- the object contract: bytes by key -------------------------------------------

    async def read_objects(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        """The bytes at each key (None if absent), in one round trip."""
        raise self._no_objects()

    async def write_objects(self, objects: Mapping[str, bytes]) -> None:
        """Write each object whole (readers see all of it or the previous one)."""
        raise self._no_objects()

    async def delete_objects(self, keys: Sequence[str]) -> None:
        """Delete the keys; absent keys are not an error."""
        raise self._no_objects()

    async def list_objects(
        self, prefix: str, *, start_after: str | None = None, limit: int = 1000
    ) -> ObjectPage:
        """Keys starting with ``prefix`` and after ``start_after``, in key order."""
        raise self._no_objects()

    async def list_all(self, prefix: str) -> list[str]:
        """Every key starting with ``prefix``, page by page, in key order."""
        keys: list[str] = []
        token: str | None = None
        while True:
            page = await self.list_objects(prefix, start_after=token)
            keys.extend(page.keys)
            if not page.truncated or not page.keys:
                return keys
            token = page.keys[-1]

    def _no_objects(self) -> NotImplementedError:
        return NotImplementedError(
            f"{type(self).__name__} implements the record contract "
            f"({', '.join(RECORD_METHODS)}), not the object contract this needs"
        )

    async def write_head(self, key: str, data: bytes, if_match: str | None = None) -> str | None:
        """Write a thread's head and return its version tag (S3: the ETag), or None for
        a storage without tags (this default: every save then reads the head first).
        With ``if_match``, write only if the stored head still has that tag, else raise
        :class:`~tulip_memory.delta.errors.HeadChanged` (another writer, a delete)."""
        await self.write_objects({key: data})
        return None

    async def copy_objects(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        """Copy ``(source, dest)`` pairs; returns the sources that were missing.

        This default reads and writes; backends that can copy server-side override it.
        """
        got = await self.read_objects([s for s, _ in pairs])
        await self.write_objects({d: got[s] or b"" for s, d in pairs if got[s] is not None})
        return [s for s, _ in pairs if got[s] is None]

    async def close(self) -> None:  # noqa: B027 - optional for backends holding nothing
        """Release what the backend holds (threads, connections)."""

    # -- threads ---------------------------------------------------------------------

    def thread(self, thread_id: str, policy: Policy | None = None) -> ThreadLog:
        """The history of one thread on this storage."""
        return ThreadLog(self, thread_id, policy or Policy())

    async def list_threads_page(
        self, page_size: int = 100, page_token: str | None = None
    ) -> ThreadPage:
        """One page of thread ids, in storage order (hash-spread, stable)."""
        if not self.uses_layout:
            raise NotImplementedError(
                f"{type(self).__name__} keeps records only: override list_threads_page "
                "to list its threads"
            )
        page = await self.list_objects(HEADS, start_after=page_token, limit=page_size)
        resolved = [head_key_thread(k) for k in page.keys]
        names = (
            await self.read_objects([n for _, n in resolved if n])
            if any(n for _, n in resolved)
            else {}
        )
        ids: list[str] = []
        for tid, name_key in resolved:
            raw = names.get(name_key) if name_key else None
            if tid is None and raw is not None:
                tid = raw.decode("utf-8", "surrogatepass")
            if tid is not None:
                ids.append(tid)
        token = page.keys[-1] if page.truncated and page.keys else None
        return ThreadPage(thread_ids=tuple(ids), next_page_token=token)

    async def iter_threads(self, page_size: int = 100) -> AsyncIterator[str]:
        """Every thread id, page by page."""
        token: str | None = None
        while True:
            page = await self.list_threads_page(page_size, token)
            for tid in page.thread_ids:
                yield tid
            if page.next_page_token is None:
                return
            token = page.next_page_token

    async def list_threads(self, limit: int | None = None) -> list[str]:
        """Thread ids (all, or the first ``limit``) in storage order."""
        out: list[str] = []
        async for tid in self.iter_threads():
            if limit is not None and len(out) >= limit:
                break
            out.append(tid)
        return out

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        """Copy a thread with all its checkpoints; replaces ``dest`` if it exists.

        History objects are copied server-side; the head is written from the bytes
        read, so the copy is consistent even while the source is being saved to.
        Returns False when the source has no checkpoints. A record storage copies
        record by record.
        """
        if not self.uses_layout:
            return await copy_records(self, source_thread_id, dest_thread_id)
        return await self.thread(source_thread_id).copy_to(self.thread(dest_thread_id))

    # -- the seed's contract ---------------------------------------------------------

    async def store(self, thread_id: str, checkpoint_id: str, checkpoint: DeltaCheckpoint) -> None:
        """Store a checkpoint as the thread's newest.

        ``checkpoint.data`` is zlib-compressed JSON: a full state, or (``is_delta``) a
        patch applied to the thread's latest state. The layout decides how it is kept.
        """
        log = self.thread(thread_id)
        try:
            value = loads(zlib.decompress(checkpoint.data))
        except (zlib.error, ValueError) as e:
            raise CorruptCheckpointError(checkpoint_id, f"undecodable checkpoint data: {e}") from e
        if checkpoint.is_delta:
            base = await log.load()
            try:
                value = apply(base if base is not None else {}, value)
            except PatchError as e:
                raise CorruptCheckpointError(checkpoint_id, f"delta does not apply: {e}") from e
        created = to_micros(checkpoint.metadata.created_at)
        await log.append(value, checkpoint_id, created)

    async def retrieve(self, thread_id: str, checkpoint_id: str) -> DeltaCheckpoint | None:
        """Retrieve a checkpoint (its own payload: the state, or its patch)."""
        return await self.thread(thread_id).retrieve(checkpoint_id)

    async def list_checkpoints(self, thread_id: str, limit: int = 10) -> list[CheckpointMetadata]:
        """List checkpoint metadata, newest first."""
        return await self.thread(thread_id).metadata(limit)

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        """Delete one checkpoint (its successor is rebased, never orphaned) or the thread."""
        log = self.thread(thread_id)
        if checkpoint_id is None:
            return await log.drop()
        return await log.delete_checkpoint(checkpoint_id)


def _implements(cls: type, methods: tuple[str, ...]) -> bool:
    """Whether ``cls`` overrides every one of ``methods`` of :class:`DeltaStorage`."""
    return all(getattr(cls, m) is not getattr(DeltaStorage, m) for m in methods)

"""``DeltaCheckpointer``: the seed's delta checkpointer over the layout of this package."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any
from uuid import uuid4

from tulip_memory.delta.cache import LatestCache
from tulip_memory.delta.codec import encode_state
from tulip_memory.delta.errors import InvalidCheckpointIdError
from tulip_memory.delta.history import HistoryCache
from tulip_memory.delta.keys import check_thread_id
from tulip_memory.delta.layout import Policy
from tulip_memory.delta.log import Change, ThreadLog
from tulip_memory.delta.manifest import to_micros
from tulip_memory.delta.memory import InMemoryDeltaStorage
from tulip_memory.delta.models import CheckpointMetadata
from tulip_memory.delta.records import RecordThreads
from tulip_memory.delta.storage import DeltaStorage, ThreadPage
from tulip_memory.state import AgentState

MAX_CHECKPOINT_ID = 1024


class DeltaCheckpointer:
    """Delta-based checkpointer for efficient state persistence.

    Each save stores what changed since the previous checkpoint (compressed) in an
    immutable history, and rewrites the thread's head: the latest state plus the
    index. The latest checkpoint loads in one GET, any older one in two round trips.
    ``max_chain_depth`` bounds the objects read per merge level (see
    :mod:`tulip_memory.delta` for the layout and its bounds); ``max_epoch_age``
    (keyword-only, not in the seed) restarts the history with a snapshot once it is
    that old, which age-based bucket lifecycle rules rely on. ``latest_cache``
    (keyword-only) bounds the latest states kept so a save appends to them (default:
    64 threads, 16 MiB of JSON; ``LatestCache(0, 0)`` keeps none, see
    :mod:`tulip_memory.delta.cache`); ``history_cache`` (keyword-only) the history
    objects kept decoded once read or written, so loading an old checkpoint again reads
    only the head, and neither do merges (default 8 MiB of JSON; ``HistoryCache(0)``
    keeps none, see :mod:`tulip_memory.delta.history`).

    A storage implementing only the seed's record contract (``store`` / ``retrieve``
    / ``list_checkpoints`` / ``delete``, as :class:`InMemoryDeltaStorage` does) gets the
    seed's scheme instead: a chain of at most ``max_chain_depth`` deltas after each
    full checkpoint (see :mod:`tulip_memory.delta.records`).

    Saves to one thread are serialised within this object; across processes the last
    write wins, as with every tulip checkpointer.
    """

    def __init__(
        self,
        storage: DeltaStorage | None = None,
        max_chain_depth: int = 5,
        compression_level: int = 6,
        *,
        max_epoch_age: timedelta | None = None,
        latest_cache: LatestCache | None = None,
        history_cache: HistoryCache | None = None,
    ) -> None:
        Policy(max_chain_depth, compression_level, max_epoch_age)  # fail early
        self.storage = storage or InMemoryDeltaStorage()
        self.max_chain_depth = max_chain_depth
        self.compression_level = compression_level
        self.max_epoch_age = max_epoch_age
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._latest = latest_cache if latest_cache is not None else LatestCache()
        self._history = history_cache if history_cache is not None else HistoryCache()

    @property
    def latest_cache(self) -> LatestCache:
        """The latest states this checkpointer keeps (see ``latest_cache``)."""
        return self._latest

    @property
    def history_cache(self) -> HistoryCache:
        """The history objects this checkpointer keeps (see ``history_cache``)."""
        return self._history

    @property
    def policy(self) -> Policy:
        """The layout policy of the current settings."""
        return Policy(self.max_chain_depth, self.compression_level, self.max_epoch_age)

    def _log(self, thread_id: str) -> ThreadLog:
        return ThreadLog(self.storage, thread_id, self.policy, self._latest, self._history)

    def _records(self) -> RecordThreads | None:
        """The record path, when the storage keeps the seed's records itself."""
        return None if self.storage.uses_layout else RecordThreads(self.storage, self.policy)

    @asynccontextmanager
    async def _writing(self, thread_id: str) -> AsyncIterator[None]:
        """Serialise this object's writes to one thread."""
        lock, users = self._locks.get(thread_id, (asyncio.Lock(), 0))
        self._locks[thread_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[thread_id]
            if users == 1:
                del self._locks[thread_id]
            else:
                self._locks[thread_id] = (lock, users - 1)

    async def save(
        self,
        state: AgentState,
        thread_id: str,
        checkpoint_id: str | None = None,
    ) -> str:
        """Save agent state with delta compression.

        Stores the change from the thread's latest checkpoint, or a full snapshot when
        there is none, when a delta would not be smaller, or when what a delta builds
        on cannot be read. Saving again under an existing id replaces that checkpoint
        (the same state again under the latest id is a no-op). Raises
        :class:`~tulip_memory.delta.errors.StateNotSerializableError` before writing
        anything when JSON cannot carry the state exactly.

        Returns:
            Checkpoint ID for the saved state
        """
        checkpoint_id = checkpoint_id or uuid4().hex
        _check_checkpoint_id(checkpoint_id)
        check_thread_id(thread_id)
        records = self._records()
        encoded = encode_state(state.to_checkpoint()) if records is not None else None
        now = datetime.now(UTC)
        async with self._writing(thread_id):
            if records is not None and encoded is not None:
                await records.save(encoded, thread_id, checkpoint_id, now)
            else:
                await self._log(thread_id).append(state, checkpoint_id, to_micros(now))
        return checkpoint_id

    async def save_onto_written(
        self, state: AgentState, thread_id: str, checkpoint_id: str, *, base: str, digest: str
    ) -> bool:
        """Save ``state`` as ``checkpoint_id`` without reading anything, only onto the
        head this object wrote last, whose latest checkpoint is ``base``, while the
        stored head is still that one (its version tag) and only when the state's
        digest is ``digest``; False when any of that does not hold (nothing written:
        then read, as :meth:`save` does). Not in the seed: for a writer that rebuilt
        ``state`` from the one it saved last (:attr:`latest_cache`)."""
        _check_checkpoint_id(checkpoint_id)
        check_thread_id(thread_id)
        if self._records() is not None:
            return False
        async with self._writing(thread_id):
            return await self._log(thread_id).append_onto_written(
                state, checkpoint_id, to_micros(datetime.now(UTC)), base=base, digest=digest
            )

    async def update(self, thread_id: str, change: Change, checkpoint_id: str) -> None:
        """Save as ``checkpoint_id`` what ``change`` makes of the thread's latest state
        (its checkpoint data, None for a new thread), read and written under the
        thread's write lock; nothing when ``change`` returns None. Not in the seed: for
        states that are not agent states (:mod:`tulip_memory.langgraph`)."""
        self._layout_only("update")
        _check_checkpoint_id(checkpoint_id)
        check_thread_id(thread_id)
        async with self._writing(thread_id):
            await self._log(thread_id).append(change, checkpoint_id, to_micros(datetime.now(UTC)))

    async def replace(self, thread_id: str, data: dict[str, Any], checkpoint_id: str) -> None:
        """Make ``data`` the thread's only checkpoint, its history deleted (not in the
        seed: what pruning a thread to its latest state needs)."""
        self._layout_only("replace")
        _check_checkpoint_id(checkpoint_id)
        check_thread_id(thread_id)
        async with self._writing(thread_id):
            await self._log(thread_id).replace(data, checkpoint_id, to_micros(datetime.now(UTC)))

    async def load_data(
        self, thread_id: str, checkpoint_id: str | None = None
    ) -> dict[str, Any] | None:
        """The checkpoint data of a checkpoint (the latest if None) as saved, without
        reading it as an agent state; None if not found. Treat it as read-only."""
        self._layout_only("load_data")
        return await self._log(thread_id).load(checkpoint_id, shared=True)

    async def load_many(
        self, thread_id: str, checkpoint_ids: Sequence[str | None]
    ) -> tuple[list[str], dict[str | None, dict[str, Any]]]:
        """The checkpoint data of several checkpoints (None: the latest) from one read
        of the head, and every checkpoint id of the thread in the order saved (ids not
        found are left out). Treat the data as read-only."""
        self._layout_only("load_many")
        return await self._log(thread_id).load_many(checkpoint_ids)

    def _layout_only(self, what: str) -> None:
        if self._records() is not None:
            raise TypeError(
                f"{what} needs a storage with the object contract (S3, file, "
                f"InMemoryObjectStorage); {type(self.storage).__name__} keeps records only"
            )

    async def load(
        self,
        thread_id: str,
        checkpoint_id: str | None = None,
    ) -> AgentState | None:
        """Load agent state from checkpoint (latest if None); None if not found.

        The latest state is one GET; an older one is the head and then its epoch's
        objects in one concurrent round trip, replayed and checked against the
        digest saved with it.
        """
        records = self._records()
        if records is not None:
            data = await records.state(thread_id, checkpoint_id)
        else:
            data = await self._log(thread_id).load(checkpoint_id, shared=True)
        return None if data is None else AgentState.from_checkpoint(data)

    async def list_checkpoints(self, thread_id: str, limit: int = 10) -> list[str]:
        """List available checkpoint IDs, newest first (one GET)."""
        if self._records() is not None:
            return [m.checkpoint_id for m in await self.storage.list_checkpoints(thread_id, limit)]
        head = await self._log(thread_id).head()
        if head is None or limit <= 0:
            return []
        return [cid for _, cid in reversed(head.manifest.checkpoints[-limit:])]

    async def get_metadata(self, thread_id: str, checkpoint_id: str) -> CheckpointMetadata | None:
        """Get metadata for a specific checkpoint."""
        if self._records() is not None:
            checkpoint = await self.storage.retrieve(thread_id, checkpoint_id)
        else:
            checkpoint = await self._log(thread_id).retrieve(checkpoint_id)
        return checkpoint.metadata if checkpoint else None

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        """Delete checkpoint(s): one (its successor is rebased) or the whole thread
        (what this object keeps of it goes too)."""
        records = self._records()
        async with self._writing(thread_id):
            if records is not None:
                return await records.delete(thread_id, checkpoint_id)
            log = self._log(thread_id)
            if checkpoint_id is None:
                return await log.drop()
            return await log.delete_checkpoint(checkpoint_id)

    async def get_storage_stats(self, thread_id: str) -> dict[str, Any]:
        """Get storage statistics for a thread.

        Returns dict with: - total_checkpoints: Number of checkpoints - total_size:
        Uncompressed size - compressed_size: Compressed size - compression_ratio:
        Overall compression ratio - full_checkpoints: Number of full checkpoints -
        delta_checkpoints: Number of delta checkpoints; and, for this layout,
        stored_bytes (bytes at rest: head and history objects), storage_objects and
        epochs.
        """
        if self._records() is not None:
            listed = await self.storage.list_checkpoints(thread_id, limit=1000)
            compressed = sum(m.compressed_size_bytes for m in listed)
            full = sum(1 for m in listed if m.is_full)
            layout = {"stored_bytes": compressed, "storage_objects": len(listed), "epochs": full}
        else:
            stats = await self._log(thread_id).stats(limit=1000)
            listed = list(stats.checkpoints)
            layout = {
                "stored_bytes": stats.stored_bytes,
                "storage_objects": stats.objects,
                "epochs": stats.epochs,
            }
        total = sum(m.size_bytes for m in listed)
        compressed = sum(m.compressed_size_bytes for m in listed)
        return {
            "total_checkpoints": len(listed),
            "total_size": total,
            "compressed_size": compressed,
            "compression_ratio": total / compressed if compressed > 0 else 1.0,
            "full_checkpoints": sum(1 for m in listed if m.is_full),
            "delta_checkpoints": sum(1 for m in listed if not m.is_full),
            **layout,
        }

    async def list_threads(self, limit: int | None = None) -> list[str]:
        """Thread ids with checkpoints (all, or the first ``limit``), in storage order."""
        return await self.storage.list_threads(limit)

    async def list_threads_page(
        self, page_size: int = 100, page_token: str | None = None
    ) -> ThreadPage:
        """One page of thread ids and the token of the next page."""
        return await self.storage.list_threads_page(page_size, page_token)

    def iter_threads(self, page_size: int = 100) -> AsyncIterator[str]:
        """Every thread id, fetched page by page."""
        return self.storage.iter_threads(page_size)

    async def copy_thread(self, source_thread_id: str, dest_thread_id: str) -> bool:
        """Branch: ``dest`` becomes a copy of ``source`` with all its checkpoints."""
        async with self._writing(dest_thread_id):
            return await self.storage.copy_thread(source_thread_id, dest_thread_id)

    async def close(self) -> None:
        await self.storage.close()

    async def __aenter__(self) -> DeltaCheckpointer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _check_checkpoint_id(checkpoint_id: object) -> None:
    if not isinstance(checkpoint_id, str) or not 0 < len(checkpoint_id) <= MAX_CHECKPOINT_ID:
        raise InvalidCheckpointIdError(
            f"checkpoint id must be a non-empty str of at most {MAX_CHECKPOINT_ID} "
            f"characters, got {checkpoint_id!r:.80}"
        )

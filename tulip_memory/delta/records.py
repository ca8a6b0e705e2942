"""Checkpoints over the seed's record contract: ``store`` / ``retrieve`` /
``list_checkpoints`` / ``delete`` of whole :class:`DeltaCheckpoint` records.

A storage written to the seed keeps what it is given and nothing else, so the
checkpointer does the seed's work on top of it: each save stores either the full
state or the patch from the thread's latest checkpoint (a :mod:`~tulip_memory.delta.diff`
patch, zlib-compressed JSON), a full one when the chain would exceed
``max_chain_depth`` deltas, when there is no readable parent, or when the patch would
not be smaller. A load walks the chain back to its full checkpoint (one ``retrieve``
per link) and replays it.

Beyond the seed, deleting one checkpoint (or saving again under an existing id) first
rewrites the checkpoints built on it as full ones, so no chain is left pointing at
something that changed or went; a chain that does not lead to a full checkpoint
raises :class:`~tulip_memory.delta.errors.CorruptCheckpointError` naming the
checkpoint, never a wrong state.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from tulip_memory.delta.codec import EncodedState, compress, dumps, loads
from tulip_memory.delta.contracts import RecordStorage
from tulip_memory.delta.diff import PatchError, apply, diff
from tulip_memory.delta.errors import CorruptCheckpointError
from tulip_memory.delta.layout import Policy
from tulip_memory.delta.models import CheckpointMetadata, DeltaCheckpoint

#: How many checkpoints of a thread the record path reads to find children or copy.
MAX_LISTED = 100_000


class RecordThreads:
    """The checkpointer's operations on a storage that implements the record contract."""

    def __init__(self, storage: RecordStorage, policy: Policy) -> None:
        self.storage = storage
        self.policy = policy

    async def save(
        self, encoded: EncodedState, thread_id: str, checkpoint_id: str, created: datetime
    ) -> None:
        latest = await self.storage.list_checkpoints(thread_id, limit=1)
        if latest:  # strictly after the newest, so storages ordering by time agree
            created = max(created, latest[0].created_at + timedelta(microseconds=1))
        if await self.storage.retrieve(thread_id, checkpoint_id) is not None:
            await self._rebase_children(thread_id, checkpoint_id)
            record = self._full(encoded, thread_id, checkpoint_id, created)
        else:
            record = await self._record(encoded, thread_id, checkpoint_id, created, latest)
        await self.storage.store(thread_id, checkpoint_id, record)

    async def _record(
        self,
        encoded: EncodedState,
        thread_id: str,
        checkpoint_id: str,
        created: datetime,
        latest: list[CheckpointMetadata],
    ) -> DeltaCheckpoint:
        full = self._full(encoded, thread_id, checkpoint_id, created)
        if not latest or latest[0].chain_depth >= self.policy.max_chain_depth:
            return full
        parent = latest[0]
        try:
            base = await self.state(thread_id, parent.checkpoint_id)
        except CorruptCheckpointError:
            return full
        if base is None:
            return full
        patch = diff(base, encoded.data) or ["{", {}, []]
        raw = dumps(patch)
        data = compress(raw, self.policy.compression_level)
        if len(data) >= len(full.data):
            return full
        meta = replace(
            full.metadata,
            parent_id=parent.checkpoint_id,
            is_full=False,
            chain_depth=parent.chain_depth + 1,
            size_bytes=len(raw),
            compressed_size_bytes=len(data),
        )
        return DeltaCheckpoint(metadata=meta, data=data, is_delta=True)

    def _full(
        self, encoded: EncodedState, thread_id: str, checkpoint_id: str, created: datetime
    ) -> DeltaCheckpoint:
        data = compress(encoded.raw, self.policy.compression_level)
        meta = CheckpointMetadata(
            checkpoint_id=checkpoint_id,
            thread_id=thread_id,
            created_at=created,
            size_bytes=len(encoded.raw),
            compressed_size_bytes=len(data),
        )
        return DeltaCheckpoint(metadata=meta, data=data, is_delta=False)

    async def latest_id(self, thread_id: str) -> str | None:
        latest = await self.storage.list_checkpoints(thread_id, limit=1)
        return latest[0].checkpoint_id if latest else None

    async def state(self, thread_id: str, checkpoint_id: str | None = None) -> Any | None:
        """The full state of a checkpoint (the latest if None); None if it is absent."""
        checkpoint_id = checkpoint_id or await self.latest_id(thread_id)
        if checkpoint_id is None:
            return None
        record = await self.storage.retrieve(thread_id, checkpoint_id)
        if record is None:
            return None
        chain = [record]
        seen = {checkpoint_id}
        while chain[-1].is_delta:
            parent_id = chain[-1].metadata.parent_id
            if parent_id is None or parent_id in seen:
                raise CorruptCheckpointError(checkpoint_id, "its delta chain has no full base")
            seen.add(parent_id)
            parent = await self.storage.retrieve(thread_id, parent_id)
            if parent is None:
                raise CorruptCheckpointError(checkpoint_id, f"parent {parent_id!r} is missing")
            chain.append(parent)
        value = _payload(chain[-1], checkpoint_id)
        for link in reversed(chain[:-1]):
            try:
                value = apply(value, _payload(link, checkpoint_id))
            except PatchError as e:
                raise CorruptCheckpointError(checkpoint_id, f"delta does not apply: {e}") from e
        return value

    async def delete(self, thread_id: str, checkpoint_id: str | None) -> bool:
        if checkpoint_id is not None:
            if await self.storage.retrieve(thread_id, checkpoint_id) is None:
                return False
            await self._rebase_children(thread_id, checkpoint_id)
        return await self.storage.delete(thread_id, checkpoint_id)

    async def _rebase_children(self, thread_id: str, checkpoint_id: str) -> None:
        """Store every checkpoint built on ``checkpoint_id`` as a full one."""
        listed = await self.storage.list_checkpoints(thread_id, limit=MAX_LISTED)
        for child in listed:
            if child.parent_id != checkpoint_id or child.checkpoint_id == checkpoint_id:
                continue
            value = await self.state(thread_id, child.checkpoint_id)
            raw = dumps(value)
            data = compress(raw, self.policy.compression_level)
            meta = replace(
                child,
                parent_id=None,
                is_full=True,
                chain_depth=0,
                size_bytes=len(raw),
                compressed_size_bytes=len(data),
            )
            rebased = DeltaCheckpoint(metadata=meta, data=data, is_delta=False)
            await self.storage.store(thread_id, child.checkpoint_id, rebased)


async def copy_records(storage: RecordStorage, source: str, dest: str) -> bool:
    """Copy every record of ``source`` to ``dest`` (oldest first); False if none."""
    listed = await storage.list_checkpoints(source, limit=MAX_LISTED)
    if not listed:
        return False
    await storage.delete(dest)
    for meta in reversed(listed):
        record = await storage.retrieve(source, meta.checkpoint_id)
        if record is not None:
            moved = replace(record, metadata=replace(record.metadata, thread_id=dest))
            await storage.store(dest, meta.checkpoint_id, moved)
    return True


def _payload(record: DeltaCheckpoint, checkpoint_id: str) -> Any:
    try:
        return loads(zlib.decompress(record.data))
    except (zlib.error, UnicodeDecodeError, ValueError) as e:
        key = record.metadata.checkpoint_id
        raise CorruptCheckpointError(checkpoint_id, f"record {key!r} is undecodable: {e}") from e

"""The seed's checkpoint records: :class:`CheckpointMetadata` and :class:`DeltaCheckpoint`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime


@dataclass(frozen=True)
class CheckpointMetadata:
    """Metadata for a checkpoint.

    ``is_full`` is true for a snapshot (a base that needs no other checkpoint);
    ``chain_depth`` counts the deltas between this checkpoint and that base.
    ``size_bytes`` is the uncompressed size of what the checkpoint stores (its delta,
    or the whole state for a snapshot), ``compressed_size_bytes`` that size compressed.
    """

    checkpoint_id: str
    thread_id: str
    parent_id: str | None = None
    is_full: bool = True
    chain_depth: int = 0
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    size_bytes: int = 0
    compressed_size_bytes: int = 0


@dataclass(frozen=True)
class DeltaCheckpoint:
    """A checkpoint as stored: its metadata and its compressed payload.

    ``data`` is zlib-compressed JSON: the state (``AgentState.to_checkpoint()``) when
    ``is_delta`` is false, else a patch from the parent's state (see
    :mod:`tulip_memory.delta.diff`).
    """

    metadata: CheckpointMetadata
    data: bytes
    is_delta: bool = True

    @property
    def compression_ratio(self) -> float:
        """Calculate compression ratio (uncompressed / compressed)."""
        compressed = self.metadata.compressed_size_bytes or len(self.data)
        if compressed <= 0:
            return 1.0
        return self.metadata.size_bytes / compressed

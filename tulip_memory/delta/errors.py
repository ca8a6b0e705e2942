"""Errors of delta checkpointing, all under :class:`~tulip_memory.errors.TulipMemoryError`.

Each carries what a caller needs: the object ``key`` that is corrupt or unreachable,
the ``path`` inside a state that JSON cannot hold, the ``thread_id`` that is refused.
"""

from __future__ import annotations

from tulip_memory.errors import TulipMemoryError


class DeltaError(TulipMemoryError):
    """Root of the delta checkpointing errors."""


class CorruptCheckpointError(DeltaError):
    """A stored object that cannot be read back: missing, truncated, corrupted.

    ``key`` names the object; the checkpoints that depend on it cannot be loaded,
    but later saves still succeed (they start from a fresh snapshot when they must).
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"checkpoint object {key!r} is unreadable: {reason}")


class StateNotSerializableError(DeltaError, TypeError):
    """A state that JSON cannot carry exactly, refused before anything is written.

    ``path`` locates the offending value (``metadata.when``, ``messages[3].metadata``).
    Subclasses :class:`TypeError`, as ``json.dumps`` would raise.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"state is not JSON-serializable at {path}: {reason}")


class InvalidThreadIdError(DeltaError, ValueError):
    """A thread id that cannot name a thread (not a string, empty, absurdly long)."""

    def __init__(self, thread_id: object, reason: str) -> None:
        self.thread_id = thread_id
        self.reason = reason
        shown = repr(thread_id)
        if len(shown) > 80:
            shown = f"{shown[:77]}..."
        super().__init__(f"invalid thread id {shown}: {reason}")


class InvalidCheckpointIdError(DeltaError, ValueError):
    """A checkpoint id that is not a non-empty string of at most 1024 characters."""


class DeltaStorageError(DeltaError):
    """A storage backend failed for a reason other than a missing object."""

    def __init__(self, key: str, cause: str) -> None:
        self.key = key
        self.cause = cause
        super().__init__(f"delta storage failed on {key!r}: {cause}")


class HeadChanged(DeltaStorageError):
    """A conditional head write found another head than the one it was based on."""

    def __init__(self, key: str) -> None:
        super().__init__(key, "the head changed since this process wrote it")

"""The object-store contract: whole objects by key, bounded reads, listing by prefix.

It is synchronous because every backend's I/O is (files, boto3): a synchronous caller
(the producer storing a claim check) calls it directly, and asynchronous callers go
through one adapter that moves each call off the event loop
(:class:`~tulip_memory.delta.objects.ObjectStoreDeltaStorage`), rather than every
backend being written twice or a sync caller paying two thread hops.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tulip_memory.credentials import redact_text
from tulip_memory.errors import TulipMemoryError


@dataclass(frozen=True)
class ObjectInfo:
    """A stored object: its key and size in bytes."""

    key: str
    size: int


@dataclass(frozen=True)
class ObjectPage:
    """One page of a listing, in key order; ``truncated`` when more follow."""

    objects: tuple[ObjectInfo, ...]
    truncated: bool

    @property
    def keys(self) -> list[str]:
        return [o.key for o in self.objects]


class ObjectStoreError(TulipMemoryError):
    """A backend failed for a reason other than a missing object: ``key`` is the object,
    ``location`` the store (a directory, ``s3://bucket``), ``cause`` what went wrong
    (with the credentials of any URL in it masked: an S3 error names its endpoint)."""

    def __init__(self, key: str, cause: str, location: str) -> None:
        self.key = key
        self.cause = redact_text(cause)
        self.location = redact_text(location)
        super().__init__(f"object store {self.location} failed on {key!r}: {self.cause}")


class ObjectChanged(ObjectStoreError):
    """A conditional ``put`` found another version than the one it was given."""

    def __init__(self, key: str, location: str) -> None:
        super().__init__(key, "the object changed since that version", location)


class ObjectStore(Protocol):
    """Bytes by key (``/``-separated segments of ``A-Za-z0-9._-``). Every object is
    written whole: a reader sees all of it or the previous one."""

    #: Whether calls wait on disk or network (async callers then run them in threads).
    blocking: bool

    def get(self, key: str, limit: int | None = None) -> bytes | None:
        """The object's bytes (None if absent); with ``limit`` (>= 1) at most its first
        ``limit`` bytes, and never more than that is fetched."""
        ...

    def put(self, key: str, data: bytes, *, if_match: str | None = None) -> str | None:
        """Write ``data`` at ``key`` and return its version tag, or None for a store
        without tags. ``if_match`` (a tag this store returned) writes only over that
        version, else raises :class:`ObjectChanged` (rewritten or deleted since)."""
        ...

    def delete(self, keys: Sequence[str]) -> None:
        """Delete the keys; absent keys are not an error."""
        ...

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> ObjectPage:
        """Keys starting with ``prefix`` and after ``start_after``, in key order."""
        ...

    def copy(self, source: str, dest: str) -> bool:
        """Copy ``source`` over ``dest`` (server-side where the backend can); False when
        ``source`` is absent."""
        ...

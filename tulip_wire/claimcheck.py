"""Claim-check: a payload too large for the broker travels by reference.

The producer stores the payload and publishes a :class:`PayloadRef` (URL, sha256,
size); the worker fetches it and gets exactly those bytes or an :class:`EventError`
naming what is wrong (missing, wrong size, wrong digest), so a tampered or truncated
object is dead-lettered with its reason instead of being applied.

Objects live under one root URL, at ``<root>/<id[:2]>/<id>.json``: the event id is 32
hex digits (checked), so keys are safe on every backend and spread over 256 prefixes.
Backends: ``file:///dir`` (owner-only files), ``s3://bucket/prefix`` (any S3 API) and
``memory://name`` (process-local, for tests and development), the stores of
:mod:`tulip_memory.objects`, called synchronously (the producer's thread, a worker's).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tulip_memory.credentials import redact_text, redact_url
from tulip_memory.env import CHECKPOINT_URL, S3_ENDPOINT_URL
from tulip_memory.errors import TulipMemoryError
from tulip_memory.objects import (
    FileObjectStore,
    MemoryObjectStore,
    ObjectStore,
    ObjectStoreError,
    S3ObjectStore,
    s3_client,
)
from tulip_wire.env import CLAIM_CHECK_URL, SPOOL_DIR
from tulip_wire.events import EventError, PayloadRef

_EVENT_ID = re.compile(r"[0-9a-f]{32}")
_KEY = re.compile(r"(?P<fan>[0-9a-f]{2})/(?P<id>[0-9a-f]{32})\.json")


def claim_check_url_from_env(env: Mapping[str, str]) -> str:
    """Where claim checks live, by the one rule producers and workers share:
    ``TULIP_CLAIM_CHECK_URL``, else ``<TULIP_CHECKPOINT_URL>/claims``, else
    ``file://<TULIP_SPOOL_DIR>/claims`` (absolute)."""
    explicit = CLAIM_CHECK_URL.read(env)
    if explicit:
        return explicit
    checkpoints = _as_url(CHECKPOINT_URL.read(env).rstrip("/"))
    if checkpoints:
        return f"{checkpoints}/claims"
    spool_dir = Path(SPOOL_DIR.read(env)).absolute()
    return f"file://{spool_dir / 'claims'}"


def _as_url(checkpoints: str) -> str:
    """A checkpointer string in URL form (``s3:b/p`` → ``s3://b/p``, ``file:./d`` →
    ``file:///abs/d``), as the registry accepts both spellings."""
    scheme, sep, rest = checkpoints.partition(":")
    if not sep or rest.startswith("//"):
        return checkpoints
    if scheme == "s3":
        return f"s3://{rest}"
    if scheme == "file":
        return f"file://{Path(rest).absolute()}"
    return checkpoints


class ClaimCheckUnavailable(TulipMemoryError):
    """The claim-check store could not be reached or written; worth retrying later."""

    def __init__(self, url: str, cause: str) -> None:
        self.url = url
        super().__init__(f"claim-check store {redact_url(url)} unavailable: {redact_text(cause)}")


@contextmanager
def _unavailable_on_failure() -> Iterator[None]:
    """The object store's failures as :class:`ClaimCheckUnavailable` (credentials
    redacted), chained to what the store raised."""
    try:
        yield
    except ObjectStoreError as e:
        raise ClaimCheckUnavailable(e.location, e.cause) from e


@dataclass(frozen=True)
class ClaimCheckStore:
    """Stores payloads by event id and returns them verified."""

    root: str
    objects: ObjectStore

    @classmethod
    def from_url(
        cls, url: str, *, endpoint_url: str | None = None, timeout: float = 10.0
    ) -> ClaimCheckStore:
        """A store for ``file:///dir``, ``s3://bucket/prefix`` or ``memory://name``.

        For S3 the endpoint is ``endpoint_url``, else ``TULIP_S3_ENDPOINT_URL``, else
        AWS; the bucket must exist (nothing is created implicitly).
        """
        parts = urlsplit(url)
        if parts.scheme == "file":
            return _file_store(url)
        if parts.scheme == "s3":
            endpoint = endpoint_url or S3_ENDPOINT_URL.read()
            return _s3_store(url, endpoint, timeout)
        if parts.scheme == "memory":
            return _memory_store(url)
        raise ValueError(
            f"claim-check URL must be file://, s3:// or memory://, got {redact_url(url)!r}"
        )

    def put(self, event_id: str, data: bytes) -> PayloadRef:
        """Store ``data`` for ``event_id``; the reference says how to check it."""
        if not _EVENT_ID.fullmatch(event_id):
            raise EventError(f"claim-check needs a 32 hex digit event id, got {event_id!r}")
        key = f"{event_id[:2]}/{event_id}.json"
        with _unavailable_on_failure():
            self.objects.put(key, bytes(data))
        digest = hashlib.sha256(data).hexdigest()
        return PayloadRef(url=f"{self.root}/{key}", sha256=digest, size=len(data))

    def delete(self, event_ids: list[str]) -> None:
        """Delete the claim checks of ``event_ids`` (absent ones are not an error; ids
        that are not 32 hex digits never name one). An erase calls this."""
        keys = [f"{i[:2]}/{i}.json" for i in event_ids if _EVENT_ID.fullmatch(i)]
        with _unavailable_on_failure():
            for start in range(0, len(keys), 1000):
                self.objects.delete(keys[start : start + 1000])

    def get(self, ref: PayloadRef, event_id: str, *, max_bytes: int | None = None) -> bytes:
        """The payload ``event_id`` stored, exactly as stored; :class:`EventError`
        otherwise, also when ``ref`` names another event's object (a forged event
        reusing a genuine one's claim check).

        Bounded by bytes read: a reference stating more than ``max_bytes`` is refused
        before anything is fetched, and at most one byte more than the stated size is
        read, so an object larger than it says (or than the limit) is refused after
        ``min(size, max_bytes) + 1`` bytes, never read whole."""
        key, owner = self._key(ref)
        if owner != event_id:
            raise EventError(
                f"payload_ref {ref.url!r} is the claim check of event {owner}, not of this one",
                event_id,
            )
        if max_bytes is not None and ref.size > max_bytes:
            raise EventError(
                f"claim-checked payload is {ref.size} bytes, over the {max_bytes} of "
                "TULIP_MAX_CLAIM_BYTES",
                event_id,
            )
        with _unavailable_on_failure():
            data = self.objects.get(key, ref.size + 1)
        if data is None:
            raise EventError(f"claim-check payload missing: {ref.url}", event_id)
        if len(data) > ref.size:
            raise EventError(
                f"claim-check payload {ref.url} is more than the {ref.size} bytes its "
                "reference says (replaced); not read further",
                event_id,
            )
        if len(data) != ref.size:
            raise EventError(
                f"claim-check payload {ref.url} is {len(data)} bytes, the reference says "
                f"{ref.size} (truncated or replaced)",
                event_id,
            )
        if hashlib.sha256(data).hexdigest() != ref.sha256:
            raise EventError(
                f"claim-check payload {ref.url} does not match its sha256 (tampered or corrupt)",
                event_id,
            )
        return data

    def _key(self, ref: PayloadRef) -> tuple[str, str | None]:
        """The object key of ``ref``, refusing URLs outside this store."""
        prefix = f"{self.root}/"
        key = ref.url[len(prefix) :] if ref.url.startswith(prefix) else ""
        match = _KEY.fullmatch(key)
        if match is None or match["fan"] != match["id"][:2]:
            raise EventError(f"payload_ref {ref.url!r} is not an object of the store {self.root}")
        return key, match["id"]


def _file_store(url: str) -> ClaimCheckStore:
    parts = urlsplit(url)
    if parts.netloc not in {"", "localhost"} or not parts.path.startswith("/"):
        raise ValueError(
            f"file claim-check URL must be file:///absolute/dir, got {redact_url(url)!r}"
        )
    directory = Path(parts.path.rstrip("/") or "/")
    return ClaimCheckStore(f"file://{directory}", FileObjectStore(directory))


def _s3_store(url: str, endpoint: str | None, timeout: float) -> ClaimCheckStore:
    parts = urlsplit(url)
    if not parts.netloc:
        raise ValueError(f"S3 claim-check URL must be s3://bucket/prefix, got {redact_url(url)!r}")
    prefix = parts.path.strip("/")
    # Two retries in botocore's legacy mode, as claim checks always had.
    client = s3_client(
        endpoint_url=endpoint,
        retry_mode="legacy",
        max_attempts=3,
        connect_timeout=timeout,
        read_timeout=timeout,
    )
    root = f"s3://{parts.netloc}/{prefix}" if prefix else f"s3://{parts.netloc}"
    objects = S3ObjectStore(parts.netloc, prefix, client, content_type="application/json")
    return ClaimCheckStore(root, objects)


def _memory_store(url: str) -> ClaimCheckStore:
    name = (urlsplit(url).netloc + urlsplit(url).path).rstrip("/")
    return ClaimCheckStore(f"memory://{name}", MemoryObjectStore.named(name))

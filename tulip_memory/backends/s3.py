"""``S3Backend``: the seed's checkpointer on S3-compatible object storage.

``S3Backend(bucket="tulip-threads", prefix="<your-prefix>/")`` is a
:class:`~tulip_memory.delta.DeltaCheckpointer` over
:class:`~tulip_memory.delta.S3DeltaStorage`: the latest state of a thread loads in one
GET, each save stores what changed (see :mod:`tulip_memory.delta`), and the thread
lifecycle of the seed (``list_threads``, ``load``, ``copy_thread``, ``delete``) works
on the bucket directly.

``queued=True`` saves through the pipeline instead: ``save`` publishes the state (one
Redis round trip; a checkpoint worker writes it to this bucket and prefix) and ``load``
reads the pending state first, so a thread reads its own writes before any worker ran.
The queued path is the ``queued`` checkpointer provider (``tulip_producer`` registers
it as an entry point), configured from the environment like every producer
(``TULIP_BROKER_URL``, ``TULIP_REDIS_URL``, ``TULIP_DATABASE_URL``...); this library
imports nothing of it. Listing and copying go to the bucket, so they see what the
workers have written: a thread whose first save is still queued is not listed yet.
Deleting waits until the thread's queued saves are written, then deletes them with the
rest, so no save still in the queue brings the thread back (``ThreadStillQueued``,
deleting nothing, if the workers do not get there in time).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from tulip_memory.backends.lifecycle import (
    INSTANT_CLASSES,
    LifecycleResult,
    install_lifecycle_rules,
)
from tulip_memory.delta import DeltaCheckpointer, S3DeltaStorage
from tulip_memory.delta.tenants import TenantStorage
from tulip_memory.env import CHECKPOINT_URL, S3_ENDPOINT_URL
from tulip_memory.providers import factory
from tulip_memory.state import AgentState


class S3Backend(DeltaCheckpointer):
    """Per-thread checkpoints under ``s3://<bucket>/<prefix>``.

    ``endpoint_url`` (else ``TULIP_S3_ENDPOINT_URL``, else AWS) selects MinIO, moto or
    another S3 API; ``client`` passes a ready boto3 client; other keyword arguments go
    to :class:`~tulip_memory.delta.S3DeltaStorage` (``region_name``, ``retry_mode``,
    ``max_concurrency``...). The bucket must exist. ``tenant`` scopes every operation
    to that tenant's threads in the pipeline's layout (:mod:`tulip_memory.delta.tenants`);
    ``queued=True`` requires it.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        queued: bool = False,
        tenant: str | None = None,
        endpoint_url: str | None = None,
        client: Any = None,
        max_chain_depth: int = 5,
        compression_level: int = 6,
        max_epoch_age: timedelta | None = None,
        **storage_options: Any,
    ) -> None:
        endpoint = endpoint_url or S3_ENDPOINT_URL.read()
        storage = S3DeltaStorage(
            bucket, prefix, endpoint_url=endpoint, client=client, **storage_options
        )
        scoped = storage if tenant is None else TenantStorage(storage, tenant)
        super().__init__(scoped, max_chain_depth, compression_level, max_epoch_age=max_epoch_age)
        self.s3: S3DeltaStorage = storage
        self.tenant = tenant
        self.bucket = bucket
        self.prefix = storage.prefix
        self.queued = queued
        self.queue: Any = self._queue() if queued else None

    @property
    def url(self) -> str:
        """This store as a checkpointer string (``s3:bucket/prefix``)."""
        return f"s3:{self.bucket}/{self.prefix.rstrip('/')}"

    def _queue(self) -> Any:
        workers = CHECKPOINT_URL.read()
        if workers and _s3_location(workers) != (self.bucket, self.prefix.rstrip("/")):
            raise ValueError(
                f"S3Backend(queued=True) reads s3://{self.bucket}/{self.prefix} but "
                f"TULIP_CHECKPOINT_URL={workers!r} is where the workers write: make them "
                "the same store"
            )
        if self.tenant is None:
            raise ValueError(
                "S3Backend(queued=True) needs tenant=...: the pipeline keys thread state "
                "by (tenant, thread id)"
            )
        direct = DeltaCheckpointer(  # every tenant's store: the queued path scopes it
            self.s3,
            self.max_chain_depth,
            self.compression_level,
            max_epoch_age=self.max_epoch_age,
        )
        return factory("queued")(config_hint=self.url, inner=direct, tenant=self.tenant)

    async def save(
        self, state: AgentState, thread_id: str, checkpoint_id: str | None = None
    ) -> str:
        """Save the state (queued: publish it; the pipeline assigns the id)."""
        if self.queue is not None:
            saved: str = await self.queue.save(state, thread_id, checkpoint_id)
            return saved
        return await super().save(state, thread_id, checkpoint_id)

    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> AgentState | None:
        """The thread's state (queued: its pending state first, then the bucket's)."""
        if self.queue is not None:
            loaded: AgentState | None = await self.queue.load(thread_id, checkpoint_id)
            return loaded
        return await super().load(thread_id, checkpoint_id)

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool:
        """Delete the thread (or one checkpoint). Queued: once the thread's queued saves
        are written, so none of them brings it back (``ThreadStillQueued`` otherwise)."""
        if self.queue is not None:
            deleted: bool = await self.queue.delete(thread_id, checkpoint_id)
            return deleted
        return await super().delete(thread_id, checkpoint_id)

    async def install_lifecycle(
        self,
        *,
        days_until_archive: int | None = None,
        days_until_delete: int | None = None,
        archive_storage_class: str = "STANDARD_IA",
    ) -> LifecycleResult:
        """Install this prefix's retention rules on the bucket (idempotent).

        See :mod:`tulip_memory.backends.lifecycle`. Refused unless ``max_epoch_age``
        is shorter than ``days_until_delete`` (and than ``days_until_archive`` for a
        class that needs a restore): a save must never need an expired or archived
        object, and an older checkpoint must stay loadable for the difference.
        """
        self._check_epoch_age("days_until_delete", days_until_delete)
        if archive_storage_class not in INSTANT_CLASSES:
            self._check_epoch_age("days_until_archive", days_until_archive)
        return await asyncio.to_thread(
            install_lifecycle_rules,
            self.s3.client,
            self.bucket,
            self.prefix,
            days_until_archive=days_until_archive,
            days_until_delete=days_until_delete,
            archive_storage_class=archive_storage_class,
        )

    def _check_epoch_age(self, name: str, days: int | None) -> None:
        if days is None:
            return
        if self.max_epoch_age is None or self.max_epoch_age >= timedelta(days=days):
            raise ValueError(
                f"{name}={days} needs S3Backend(..., max_epoch_age=timedelta(days=N)) with "
                f"N < {days}: otherwise a thread's history can outlive its objects "
                f"(max_epoch_age is {self.max_epoch_age})"
            )

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.close()
        await super().close()
        if self.storage is not self.s3:  # a tenant's view leaves the bucket's storage open
            await self.s3.close()


def _s3_location(url: str) -> tuple[str, str] | None:
    """``(bucket, prefix)`` of an ``s3:`` checkpointer string, else None."""
    provider, _, hint = url.partition(":")
    if provider != "s3":
        return None
    hint = hint[2:] if hint.startswith("//") else hint
    bucket, _, prefix = hint.partition("/")
    return bucket, prefix.strip("/")

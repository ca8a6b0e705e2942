"""Delta storage on an :class:`~tulip_memory.objects.ObjectStore`: the object contract of
:class:`~tulip_memory.delta.storage.DeltaStorage`, written once for every store.

The stores are synchronous (their I/O is: files, boto3) and checkpointing is async, so
this is the one place where the two meet: each call of a blocking store runs in a
thread (the storage's own pool, else the loop's default one), never on the event loop;
the GETs of one :meth:`read_objects` run concurrently (one round trip), as do the PUTs
of one write and the copies of one copy. The store's errors become this package's
(:class:`~tulip_memory.delta.errors.DeltaStorageError`, ``HeadChanged``).

:class:`FileDeltaStorage`, :class:`S3DeltaStorage` and :class:`InMemoryObjectStorage`
are this storage on the file, S3 and in-memory stores, built from their arguments.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tulip_memory.delta.errors import DeltaStorageError, HeadChanged
from tulip_memory.delta.storage import DeltaStorage
from tulip_memory.objects import (
    FileObjectStore,
    MemoryObjectStore,
    ObjectChanged,
    ObjectPage,
    ObjectStore,
    ObjectStoreError,
    S3ObjectStore,
    s3_client,
)

T = TypeVar("T")


class ObjectStoreDeltaStorage(DeltaStorage):
    """Delta checkpoints in ``objects``. ``threads`` runs its calls (closed with this
    storage); ``conditional_writes``: see :meth:`write_head`."""

    def __init__(
        self,
        objects: ObjectStore,
        *,
        threads: ThreadPoolExecutor | None = None,
        conditional_writes: bool = True,
    ) -> None:
        self.objects = objects
        #: Heads written with ``If-Match`` on the version tag of the head this process
        #: wrote last, so such a save does not read the head first (stores with tags:
        #: S3; turn it off for an S3 API that ignores ``If-Match``).
        self.conditional_writes = conditional_writes
        self._threads = threads

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            if not self.objects.blocking:
                return fn(*args, **kwargs)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._threads, functools.partial(fn, *args, **kwargs))
        except ObjectChanged as e:
            raise HeadChanged(e.key) from e
        except ObjectStoreError as e:
            raise DeltaStorageError(e.key, e.cause) from e

    async def read_objects(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        found = await asyncio.gather(*(self._run(self.objects.get, k) for k in keys))
        return dict(zip(keys, found, strict=True))

    async def write_objects(self, objects: Mapping[str, bytes]) -> None:
        await asyncio.gather(*(self._run(self.objects.put, k, v) for k, v in objects.items()))

    async def write_head(self, key: str, data: bytes, if_match: str | None = None) -> str | None:
        """The head, conditionally on its version tag when ``if_match`` is given, so a
        save onto the head this process wrote skips reading it."""
        tag = await self._run(self.objects.put, key, data, if_match=if_match)
        return tag if self.conditional_writes else None

    async def delete_objects(self, keys: Sequence[str]) -> None:
        await self._run(self.objects.delete, list(keys))

    async def list_objects(
        self, prefix: str, *, start_after: str | None = None, limit: int = 1000
    ) -> ObjectPage:
        return await self._run(self.objects.list, prefix, start_after=start_after, limit=limit)

    async def copy_objects(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        done = await asyncio.gather(*(self._run(self.objects.copy, s, d) for s, d in pairs))
        return [s for (s, _), ok in zip(pairs, done, strict=True) if not ok]

    async def close(self) -> None:
        """Stop this storage's threads (the store itself holds nothing to release)."""
        if self._threads is not None:
            await asyncio.to_thread(self._threads.shutdown)


class FileDeltaStorage(ObjectStoreDeltaStorage):
    """Delta checkpoints as files under ``base_dir`` (created on first write; see
    :class:`~tulip_memory.objects.FileObjectStore`)."""

    def __init__(self, base_dir: str | os.PathLike[str], *, fsync: bool = True) -> None:
        store = FileObjectStore(base_dir, fsync=fsync)
        super().__init__(store)
        self.base_dir = store.base_dir
        self.fsync = fsync


class S3DeltaStorage(ObjectStoreDeltaStorage):
    """Delta checkpoints under ``s3://<bucket>/<prefix>``.

    ``endpoint_url`` selects a non-AWS endpoint (MinIO, moto); credentials and region
    come from the usual AWS configuration unless ``client`` is given ready-made. Calls
    run in this storage's own ``max_concurrency`` threads. ``conditional_writes``
    (default on): see :meth:`write_head`.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        client: Any = None,
        retry_mode: str = "standard",
        max_attempts: int = 5,
        max_concurrency: int = 16,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        conditional_writes: bool = True,
    ) -> None:
        store = S3ObjectStore(
            bucket,
            prefix,
            client
            or s3_client(
                endpoint_url=endpoint_url,
                region_name=region_name,
                retry_mode=retry_mode,
                max_attempts=max_attempts,
                max_pool_connections=max_concurrency,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
            ),
        )
        threads = ThreadPoolExecutor(max_concurrency, thread_name_prefix="tulip-s3")
        super().__init__(store, threads=threads, conditional_writes=conditional_writes)
        self.bucket, self.prefix, self.client = store.bucket, store.prefix, store.client


class InMemoryObjectStorage(ObjectStoreDeltaStorage):
    """Objects by key in a dict: the layout of :mod:`tulip_memory.delta`, in memory."""

    def __init__(self) -> None:
        super().__init__(MemoryObjectStore())

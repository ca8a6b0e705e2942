"""Delta storage on any S3 API (AWS, MinIO, moto): a bucket and a key prefix.

boto3 is synchronous, so every call runs in this storage's own thread pool, never on
the event loop; the GETs of one :meth:`read_objects` call run concurrently (one round
trip). Throttling, 5xx answers and dropped connections are retried by botocore's
retry modes (``"standard"`` by default, ``"adaptive"`` adds client-side rate limiting).
A copy is a server-side ``CopyObject``. Nothing is created implicitly: the bucket
must exist.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tulip_memory.delta.errors import DeltaStorageError, HeadChanged
from tulip_memory.delta.storage import DeltaStorage, ObjectInfo, ObjectPage
from tulip_memory.s3client import RETRY_MODES, s3_client

T = TypeVar("T")
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_CHANGED = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
_BODY_ATTEMPTS = 3


class S3DeltaStorage(DeltaStorage):
    """Delta checkpoints under ``s3://<bucket>/<prefix>``.

    ``endpoint_url`` selects a non-AWS endpoint (MinIO, moto); credentials and region
    come from the usual AWS configuration unless ``client`` is given ready-made.
    ``conditional_writes`` (default on): see :meth:`write_head`.
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
        if not bucket or "/" in bucket:
            raise ValueError(f"S3 bucket name {bucket!r} is not valid")
        if retry_mode not in RETRY_MODES:
            raise ValueError(f"retry_mode must be standard, adaptive or legacy: {retry_mode!r}")
        self.bucket = bucket
        #: Heads written with ``If-Match`` on the ETag of the head this process wrote
        #: last, so such a save does not read the head first (AWS S3, MinIO; turn it off
        #: for a store that ignores ``If-Match``).
        self.conditional_writes = conditional_writes
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = client or s3_client(
            endpoint_url=endpoint_url,
            region_name=region_name,
            retry_mode=retry_mode,
            max_attempts=max_attempts,
            max_pool_connections=max_concurrency,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )
        self._executor = ThreadPoolExecutor(max_concurrency, thread_name_prefix="tulip-s3")

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def _call(self, key: str, method: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, method)(Bucket=self.bucket, **kwargs)
        except ClientError as e:
            if _error_code(e) in _MISSING:
                raise _NotFound(key) from e
            raise DeltaStorageError(key, f"s3 {method}: {e}") from e
        except BotoCoreError as e:
            raise DeltaStorageError(key, f"s3 {method}: {e}") from e

    def _get(self, key: str) -> bytes | None:
        from botocore.exceptions import BotoCoreError

        for attempt in range(_BODY_ATTEMPTS):
            try:
                response = self._call(key, "get_object", Key=self.prefix + key)
            except _NotFound:
                return None
            try:
                body: bytes = response["Body"].read()
                return body
            except (BotoCoreError, OSError) as e:  # the stream broke after the answer began
                if attempt + 1 == _BODY_ATTEMPTS:
                    raise DeltaStorageError(key, f"s3 get_object body: {e}") from e
        raise AssertionError("unreachable")

    async def read_objects(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        found = await asyncio.gather(*(self._run(self._get, k) for k in keys))
        return dict(zip(keys, found, strict=True))

    def _put(self, key: str, data: bytes) -> None:
        self._call(key, "put_object", Key=self.prefix + key, Body=data)

    def _put_head(self, key: str, data: bytes, if_match: str | None) -> str | None:
        kwargs: dict[str, Any] = {"Key": self.prefix + key, "Body": data}
        if if_match is not None:
            kwargs["IfMatch"] = if_match
        try:
            response = self._call(key, "put_object", **kwargs)
        except _NotFound as e:  # If-Match on a head that was deleted
            raise HeadChanged(key) from e
        except DeltaStorageError as e:
            if _error_code(e.__cause__) in _CHANGED:
                raise HeadChanged(key) from e
            raise
        tag = response.get("ETag")
        return str(tag) if tag and self.conditional_writes else None

    async def write_head(self, key: str, data: bytes, if_match: str | None = None) -> str | None:
        """The head, conditionally on its ETag when ``if_match`` is given (S3 ``If-Match``
        on PutObject), so a save onto the head this process wrote skips reading it."""
        return await self._run(self._put_head, key, data, if_match)

    async def write_objects(self, objects: Mapping[str, bytes]) -> None:
        await asyncio.gather(*(self._run(self._put, k, v) for k, v in objects.items()))

    def _delete_batch(self, keys: Sequence[str]) -> None:
        batch = {"Objects": [{"Key": self.prefix + k} for k in keys], "Quiet": True}
        response = self._call(keys[0], "delete_objects", Delete=batch)
        errors = response.get("Errors") or []
        if errors:
            first = errors[0]
            raise DeltaStorageError(first.get("Key", keys[0]), f"s3 delete: {first}")

    async def delete_objects(self, keys: Sequence[str]) -> None:
        batches = [list(keys[i : i + 1000]) for i in range(0, len(keys), 1000)]
        await asyncio.gather(*(self._run(self._delete_batch, b) for b in batches))

    def _list(self, prefix: str, start_after: str | None, limit: int) -> ObjectPage:
        kwargs: dict[str, Any] = {"Prefix": self.prefix + prefix, "MaxKeys": limit}
        if start_after:
            kwargs["StartAfter"] = self.prefix + start_after
        response = self._call(prefix, "list_objects_v2", **kwargs)
        cut = len(self.prefix)
        objects = tuple(
            ObjectInfo(o["Key"][cut:], int(o["Size"])) for o in response.get("Contents") or ()
        )
        return ObjectPage(objects=objects, truncated=bool(response.get("IsTruncated")))

    async def list_objects(
        self, prefix: str, *, start_after: str | None = None, limit: int = 1000
    ) -> ObjectPage:
        return await self._run(self._list, prefix, start_after, max(1, min(limit, 1000)))

    def _copy(self, source: str, dest: str) -> bool:
        copy_source = {"Bucket": self.bucket, "Key": self.prefix + source}
        try:
            self._call(dest, "copy_object", Key=self.prefix + dest, CopySource=copy_source)
        except _NotFound:
            return False
        return True

    async def copy_objects(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        done = await asyncio.gather(*(self._run(self._copy, s, d) for s, d in pairs))
        return [s for (s, _), ok in zip(pairs, done, strict=True) if not ok]

    async def close(self) -> None:
        """Stop this storage's threads (the client needs no closing)."""
        await asyncio.to_thread(self._executor.shutdown)


class _NotFound(Exception):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(key)


def _error_code(error: Any) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))

"""The object-store contract on ``minio`` (MinIO's S3 client: SigV4 signing and urllib3,
no botocore), for the benches only: what a save costs with a lighter S3 client.

:class:`MinioS3` answers :class:`~tulip_memory.objects.ObjectStore` the way
:class:`~tulip_memory.objects.S3ObjectStore` does (a version tag is the ETag, a
conditional put sends ``If-Match``), so :class:`~tulip_memory.delta.objects.
ObjectStoreDeltaStorage` runs on it unchanged. Install ``minio`` in the bench
environment only; the project does not depend on it.

Where minio differs from the contract, and how this answers it: its public
``put_object`` sends no ``If-Match`` (it turns unknown headers into user metadata), so a
put goes through ``Minio._put_object``, the private call under it that takes headers
as they are; a minio release may move it.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from tulip_memory.objects import ObjectChanged, ObjectInfo, ObjectPage, ObjectStoreError


class MinioS3:
    """Objects under ``s3://<bucket>/<prefix>`` on ``endpoint`` (an ``http://`` or
    ``https://`` URL), with the given credentials."""

    blocking = True

    def __init__(
        self,
        bucket: str,
        prefix: str,
        endpoint: str,
        access_key: str,
        secret_key: str,
        region: str = "us-east-1",
    ) -> None:
        # imported by name: a bench-only package, not in the project's environment
        minio = importlib.import_module("minio")
        self.s3_error: Any = importlib.import_module("minio.error").S3Error
        self.delete_object: Any = importlib.import_module("minio.deleteobjects").DeleteObject
        self.copy_source: Any = importlib.import_module("minio.commonconfig").CopySource
        url = urlsplit(endpoint)
        self.client: Any = minio.Minio(
            url.netloc,
            access_key=access_key,
            secret_key=secret_key,
            secure=url.scheme == "https",
            region=region,
        )
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.location = f"s3://{bucket}"

    def _error(self, key: str, e: Exception) -> ObjectStoreError:
        return ObjectStoreError(key, f"minio: {type(e).__name__}: {e}", self.location)

    def _missing(self, e: Exception) -> bool:
        return isinstance(e, self.s3_error) and e.code in ("NoSuchKey", "NoSuchObject")

    def get(self, key: str, limit: int | None = None) -> bytes | None:
        try:
            if limit is not None and self._size(key) == 0:  # no range in an empty object
                return b""
            response = self.client.get_object(self.bucket, self.prefix + key, length=limit)
        except Exception as e:
            if self._missing(e):
                return None
            raise self._error(key, e) from e
        try:
            return bytes(response.data)
        finally:
            response.close()
            response.release_conn()

    def _size(self, key: str) -> int | None:
        try:
            return int(self.client.stat_object(self.bucket, self.prefix + key).size)
        except Exception as e:
            if self._missing(e):
                return None
            raise

    def put(self, key: str, data: bytes, *, if_match: str | None = None) -> str | None:
        headers = {"Content-Type": "application/octet-stream"}
        if if_match is not None:
            headers["If-Match"] = f'"{if_match}"'
        try:
            done = self.client._put_object(self.bucket, self.prefix + key, data, headers)
        except Exception as e:
            if (
                if_match is not None
                and isinstance(e, self.s3_error)
                and e.code
                in (
                    "PreconditionFailed",
                    "NoSuchKey",
                )
            ):
                raise ObjectChanged(key, self.location) from e
            raise self._error(key, e) from e
        return str(done.etag) if done.etag else None

    def delete(self, keys: Sequence[str]) -> None:
        targets = [self.delete_object(self.prefix + k) for k in keys]
        try:
            errors = list(self.client.remove_objects(self.bucket, targets))
        except Exception as e:
            raise self._error(keys[0] if keys else "", e) from e
        if errors:
            raise self._error(str(errors[0].name), RuntimeError(str(errors[0].message)))

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> ObjectPage:
        cut, found = len(self.prefix), list[ObjectInfo]()
        after = self.prefix + start_after if start_after else None
        listed = self.client.list_objects(
            self.bucket, prefix=self.prefix + prefix, recursive=True, start_after=after
        )
        try:
            for item in listed:
                found.append(ObjectInfo(item.object_name[cut:], int(item.size or 0)))
                if len(found) > limit:
                    break
        except Exception as e:
            raise self._error(prefix, e) from e
        return ObjectPage(objects=tuple(found[:limit]), truncated=len(found) > limit)

    def copy(self, source: str, dest: str) -> bool:
        try:
            self.client.copy_object(
                self.bucket, self.prefix + dest, self.copy_source(self.bucket, self.prefix + source)
            )
        except Exception as e:
            if self._missing(e):
                return False
            raise self._error(source, e) from e
        return True

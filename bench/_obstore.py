"""The object-store contract on ``obstore`` (Rust's ``object_store`` crate), for the
benches only: what a save costs when the S3 client is not botocore.

:class:`ObstoreS3` answers :class:`~tulip_memory.objects.ObjectStore` the way
:class:`~tulip_memory.objects.S3ObjectStore` does (a version tag is the ETag, a
conditional put sends ``If-Match``), so :class:`~tulip_memory.delta.objects.
ObjectStoreDeltaStorage` runs on it unchanged. Install ``obstore`` in the bench
environment only; the project does not depend on it.

Where obstore differs from the contract, and how this answers it: it lists by whole path
segments (this lists the prefix's directory and keeps the keys with the prefix); a
ranged GET of an empty object is an error (this returns ``b""`` when the object's size
is 0). Not answered: its runtime does not survive ``fork`` (a child's first request
hangs once the parent has made one), so nothing here may run before a prefork pool forks.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from tulip_memory.objects import ObjectChanged, ObjectInfo, ObjectPage, ObjectStoreError


class ObstoreS3:
    """Objects under ``s3://<bucket>/<prefix>`` on ``endpoint`` (path-style, as moto
    and MinIO take), credentials from the usual ``AWS_*`` variables."""

    blocking = True

    def __init__(self, bucket: str, prefix: str, endpoint: str, region: str = "us-east-1") -> None:
        # imported by name: a bench-only package, not in the project's environment
        self.ob: Any = importlib.import_module("obstore")
        self.precondition: Any = importlib.import_module("obstore.exceptions").PreconditionError
        self.store = importlib.import_module("obstore.store").S3Store(
            bucket,
            endpoint=endpoint,
            region=region,
            virtual_hosted_style_request=False,
            client_options={
                "allow_http": endpoint.startswith("http://"),
                "connect_timeout": timedelta(seconds=5),
                "timeout": timedelta(seconds=30),
            },
            retry_config={"max_retries": 4, "retry_timeout": timedelta(seconds=30)},
        )
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.location = f"s3://{bucket}"

    def _error(self, key: str, e: Exception) -> ObjectStoreError:
        return ObjectStoreError(key, f"obstore: {type(e).__name__}: {e}", self.location)

    def get(self, key: str, limit: int | None = None) -> bytes | None:
        path = self.prefix + key
        try:
            if limit is None:
                return bytes(self.ob.get(self.store, path).bytes())
            return bytes(self.ob.get_range(self.store, path, start=0, length=limit))
        except FileNotFoundError:  # obstore's "not found"
            return None
        except Exception as e:
            if limit is not None and self._size(key) == 0:  # no range in an empty object
                return b""
            raise self._error(key, e) from e

    def _size(self, key: str) -> int | None:
        try:
            return int(self.ob.head(self.store, self.prefix + key)["size"])
        except FileNotFoundError:
            return None

    def put(self, key: str, data: bytes, *, if_match: str | None = None) -> str | None:
        mode: Any = "overwrite" if if_match is None else {"e_tag": if_match}
        try:
            done = self.ob.put(self.store, self.prefix + key, data, mode=mode)
        except (self.precondition, FileNotFoundError) as e:
            if if_match is None:
                raise self._error(key, e) from e
            raise ObjectChanged(key, self.location) from e
        except Exception as e:
            raise self._error(key, e) from e
        tag = done.get("e_tag")
        return str(tag) if tag else None

    def delete(self, keys: Sequence[str]) -> None:
        if keys:
            try:
                self.ob.delete(self.store, [self.prefix + k for k in keys])
            except Exception as e:
                raise self._error(keys[0], e) from e

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> ObjectPage:
        """obstore lists by path (whole ``/`` segments): this lists the prefix's
        directory and keeps the keys that start with the prefix, in the order S3
        lists them (by key)."""
        cut, found = len(self.prefix), list[ObjectInfo]()
        directory = self.prefix + prefix[: prefix.rfind("/") + 1]
        offset = self.prefix + start_after if start_after else None
        stream = self.ob.list(self.store, directory or None, offset=offset, chunk_size=limit + 1)
        for chunk in stream:
            found.extend(
                ObjectInfo(m["path"][cut:], int(m["size"]))
                for m in chunk
                if m["path"].startswith(self.prefix + prefix)
            )
            if len(found) > limit:
                break
        return ObjectPage(objects=tuple(found[:limit]), truncated=len(found) > limit)

    def copy(self, source: str, dest: str) -> bool:
        try:
            self.ob.copy(self.store, self.prefix + source, self.prefix + dest)
        except FileNotFoundError:
            return False
        except Exception as e:
            raise self._error(source, e) from e
        return True

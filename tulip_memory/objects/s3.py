"""Objects on any S3 API (AWS, MinIO, moto): a bucket and a key prefix, and the one S3
client builder of the project.

Each client comes from a session of its own (boto3's default session is not safe to
build clients from on several threads at once); credentials and region come from the
usual AWS configuration. Throttling, 5xx answers and dropped connections are retried
by botocore's retry modes (``"standard"`` by default, ``"adaptive"`` adds client-side
rate limiting, ``"legacy"`` is botocore's old default); a body that breaks after the
answer began is fetched again. A bounded read is a ranged GET, a copy a server-side
``CopyObject``, a version tag the ETag (``If-Match`` on PutObject). Nothing is created
implicitly: the bucket must exist.

botocore sends every ``PutObject`` with ``Expect: 100-continue``: the body waits for the
server's interim answer, one more round trip per write. For bodies up to
:data:`EXPECT_CONTINUE_BYTES` (a head, a claim check) the clients built here send the
body at once (on moto, a 59 KB put p50 11.5 -> 8.3 ms); larger ones keep the header,
which lets a server refuse them before they are sent.

botocore (1.36 on) also computes a CRC32 of every ``PutObject`` body and asks for and
checks one on every ``GetObject``. Every object this project writes carries its own
check, verified on each read (a checkpoint object's frame its CRC32,
:mod:`tulip_memory.delta.codec`; a claim check its sha256), so the clients built here
compute and check S3's checksums only where the API requires them (``when_required``):
less CPU on both sides of every request (on moto, ~0.05 ms of a ~2.4 ms put or get on
the client, and the server no longer verifies and stores one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tulip_memory.objects.base import ObjectChanged, ObjectInfo, ObjectPage, ObjectStoreError

RETRY_MODES = ("standard", "adaptive", "legacy")
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_CHANGED = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
_BODY_ATTEMPTS = 3
#: PutObject bodies up to this size are sent without ``Expect: 100-continue``.
EXPECT_CONTINUE_BYTES = 1024 * 1024


def s3_client(
    *,
    endpoint_url: str | None = None,
    region_name: str | None = None,
    retry_mode: str = "standard",
    max_attempts: int = 5,
    max_pool_connections: int = 10,
    connect_timeout: float = 5.0,
    read_timeout: float = 30.0,
) -> Any:
    """A boto3 S3 client; ``max_attempts`` counts the first attempt."""
    if retry_mode not in RETRY_MODES:
        raise ValueError(f"retry_mode must be standard, adaptive or legacy: {retry_mode!r}")
    import boto3
    from botocore.config import Config

    config = Config(
        retries={"mode": retry_mode, "total_max_attempts": max_attempts},
        max_pool_connections=max_pool_connections,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    session = boto3.session.Session()
    client = session.client("s3", endpoint_url=endpoint_url, region_name=region_name, config=config)
    client.meta.events.register("before-send.s3.PutObject", _small_bodies_at_once)
    return client


def _small_bodies_at_once(request: Any, **_: Any) -> None:
    """Drop ``Expect: 100-continue`` from a request whose body is small."""
    length = request.headers.get("Content-Length")
    if length is not None and int(length) <= EXPECT_CONTINUE_BYTES:
        request.headers.pop("Expect", None)


class S3ObjectStore:
    """Objects under ``s3://<bucket>/<prefix>`` through ``client`` (see :func:`s3_client`);
    ``content_type`` is set on every object written, when given."""

    blocking = True

    def __init__(
        self, bucket: str, prefix: str, client: Any, *, content_type: str | None = None
    ) -> None:
        if not bucket or "/" in bucket:
            raise ValueError(f"S3 bucket name {bucket!r} is not valid")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = client
        self.content_type = content_type
        self.location = f"s3://{bucket}"

    def _call(self, key: str, method: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, method)(Bucket=self.bucket, **kwargs)
        except ClientError as e:
            if _error_code(e) in _MISSING:
                raise _NotFound(key, f"s3 {method}: {e}", self.location) from e
            raise self._error(key, f"s3 {method}: {e}") from e
        except BotoCoreError as e:
            raise self._error(key, f"s3 {method}: {e}") from e

    def _error(self, key: str, cause: str) -> ObjectStoreError:
        return ObjectStoreError(key, cause, self.location)

    def get(self, key: str, limit: int | None = None) -> bytes | None:
        """By a ranged GET when ``limit`` is given: the server sends no more, and no
        more is read if it ignores the range."""
        from botocore.exceptions import BotoCoreError

        ranged = {} if limit is None else {"Range": f"bytes=0-{limit - 1}"}
        for attempt in range(_BODY_ATTEMPTS):
            try:
                body = self._call(key, "get_object", Key=self.prefix + key, **ranged)["Body"]
            except _NotFound:
                return None
            except ObjectStoreError as e:
                if _error_code(e.__cause__) == "InvalidRange":  # past the end: empty
                    return b""
                raise
            try:
                return bytes(body.read() if limit is None else body.read(limit))
            except (BotoCoreError, OSError) as e:  # the stream broke after the answer began
                if attempt + 1 == _BODY_ATTEMPTS:
                    raise self._error(key, f"s3 get_object body: {e}") from e
            finally:
                body.close()
        raise AssertionError("unreachable")

    def put(self, key: str, data: bytes, *, if_match: str | None = None) -> str | None:
        kwargs: dict[str, Any] = {"Key": self.prefix + key, "Body": data}
        if self.content_type is not None:
            kwargs["ContentType"] = self.content_type
        if if_match is not None:
            kwargs["IfMatch"] = if_match
        try:
            response = self._call(key, "put_object", **kwargs)
        except ObjectStoreError as e:  # not found: If-Match on an object since deleted
            changed = isinstance(e, _NotFound) or _error_code(e.__cause__) in _CHANGED
            if if_match is not None and changed:
                raise ObjectChanged(key, self.location) from e
            raise
        tag = response.get("ETag")
        return str(tag) if tag else None

    def delete(self, keys: Sequence[str]) -> None:
        """In batches of 1000 (the most one DeleteObjects takes)."""
        for i in range(0, len(keys), 1000):
            batch = keys[i : i + 1000]
            request = {"Objects": [{"Key": self.prefix + k} for k in batch], "Quiet": True}
            errors = self._call(batch[0], "delete_objects", Delete=request).get("Errors") or []
            if errors:
                raise self._error(errors[0].get("Key", batch[0]), f"s3 delete: {errors[0]}")

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> ObjectPage:
        kwargs: dict[str, Any] = {
            "Prefix": self.prefix + prefix,
            "MaxKeys": max(1, min(limit, 1000)),
        }
        if start_after:
            kwargs["StartAfter"] = self.prefix + start_after
        response = self._call(prefix, "list_objects_v2", **kwargs)
        cut = len(self.prefix)
        objects = tuple(
            ObjectInfo(o["Key"][cut:], int(o["Size"])) for o in response.get("Contents") or ()
        )
        return ObjectPage(objects=objects, truncated=bool(response.get("IsTruncated")))

    def copy(self, source: str, dest: str) -> bool:
        copy_source = {"Bucket": self.bucket, "Key": self.prefix + source}
        try:
            self._call(dest, "copy_object", Key=self.prefix + dest, CopySource=copy_source)
        except _NotFound:
            return False
        return True


class _NotFound(ObjectStoreError):
    """No such object (the callers that expect it turn it into None or False)."""


def _error_code(error: Any) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))

"""The object-store contract: one suite, every backend (memory, file, S3 on moto)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.delta.conftest import make_bucket
from tulip_memory.objects import (
    FileObjectStore,
    MemoryObjectStore,
    ObjectChanged,
    ObjectStore,
    ObjectStoreError,
    S3ObjectStore,
    s3_client,
)
from tulip_memory.objects.s3 import EXPECT_CONTINUE_BYTES


@pytest.fixture(scope="module")
def client(s3_endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")


@pytest.fixture(params=["memory", "file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    """A fresh, empty store of each backend."""
    if request.param == "memory":
        yield MemoryObjectStore()
    elif request.param == "file":
        yield FileObjectStore(tmp_path / "objects", fsync=False)
    else:
        s3 = request.getfixturevalue("client")
        yield S3ObjectStore(make_bucket(s3), "some/prefix", s3)


def test_get_returns_exactly_what_was_put_or_none(store: ObjectStore) -> None:
    data = os.urandom(70_000) + "ünïcode".encode()
    assert store.get("a/b") is None
    store.put("a/b", data)
    store.put("empty", b"")
    assert store.get("a/b") == data and store.get("empty") == b""
    store.put("a/b", b"shorter")  # replaced whole
    assert store.get("a/b") == b"shorter"
    assert store.get("a") is None and store.get("a/b/c") is None


@pytest.mark.parametrize(("limit", "expected"), [(1, b"0"), (5, b"01234"), (10, b"0123456789")])
def test_a_bounded_get_returns_at_most_limit_bytes(
    store: ObjectStore, limit: int, expected: bytes
) -> None:
    store.put("k", b"0123456789")
    assert store.get("k", limit) == expected
    assert store.get("k", limit + 1000) == b"0123456789"[: limit + 1000]


def test_a_bounded_get_of_an_empty_or_missing_object(store: ObjectStore) -> None:
    store.put("empty", b"")
    assert store.get("empty", 1) == b""
    assert store.get("missing", 1) is None


def test_list_is_in_key_order_by_prefix_and_pages(store: ObjectStore) -> None:
    keys = ["b/2", "a/1", "a/10", "ab/3", "a/2", "c"]
    for i, key in enumerate(keys):
        store.put(key, b"x" * i)
    page = store.list("a/")
    assert page.keys == ["a/1", "a/10", "a/2"] and not page.truncated
    assert [o.size for o in page.objects] == [1, 2, 4]
    assert store.list("a").keys == ["a/1", "a/10", "a/2", "ab/3"]
    assert store.list("").keys == sorted(keys)
    first = store.list("", limit=2)
    assert first.keys == ["a/1", "a/10"] and first.truncated
    rest = store.list("", start_after=first.keys[-1], limit=10)
    assert rest.keys == ["a/2", "ab/3", "b/2", "c"] and not rest.truncated
    assert store.list("zz/").keys == []


def test_delete_removes_and_ignores_absent_keys(store: ObjectStore) -> None:
    store.put("a/1", b"1")
    store.put("a/2", b"2")
    store.delete(["a/1", "a/missing", "nowhere/x"])
    assert store.get("a/1") is None and store.get("a/2") == b"2"
    store.delete([])
    store.delete(["a/2"])
    assert store.list("").keys == []


def test_copy_replaces_the_destination_and_reports_a_missing_source(store: ObjectStore) -> None:
    store.put("src/a", b"source")
    store.put("dst/a", b"old destination")
    assert store.copy("src/a", "dst/a") is True
    assert store.get("dst/a") == b"source" and store.get("src/a") == b"source"
    assert store.copy("src/missing", "dst/b") is False
    assert store.get("dst/b") is None


def test_a_conditional_put_writes_only_over_the_version_it_names(store: ObjectStore) -> None:
    """Stores with version tags honour ``if_match``; stores without return None."""
    tag = store.put("head", b"v1")
    if tag is None:
        assert store.put("head", b"v2") is None and store.get("head") == b"v2"
        return
    newer = store.put("head", b"v2", if_match=tag)
    assert newer is not None and newer != tag and store.get("head") == b"v2"
    with pytest.raises(ObjectChanged):
        store.put("head", b"stale", if_match=tag)
    store.delete(["head"])
    with pytest.raises(ObjectChanged):
        store.put("head", b"after delete", if_match=newer)
    assert store.get("head") is None


@pytest.fixture(params=["file", "s3"])
def broken(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[ObjectStore, str]:
    """A store that cannot work (its directory is a file; its bucket does not exist)
    and where it says it is."""
    if request.param == "file":
        (tmp_path / "not-a-dir").write_bytes(b"")
        return FileObjectStore(tmp_path / "not-a-dir", fsync=False), str(tmp_path / "not-a-dir")
    client = s3_client(endpoint_url=request.getfixturevalue("s3_endpoint"), max_attempts=1)
    return S3ObjectStore("no-such-bucket-here", "", client), "s3://no-such-bucket-here"


def test_failures_are_object_store_errors_naming_the_store(broken: tuple[ObjectStore, str]) -> None:
    store, location = broken
    with pytest.raises(ObjectStoreError) as e:
        store.put("a/b", b"x")
    assert e.value.location == location and e.value.key == "a/b"
    assert location in str(e.value) and e.value.__cause__ is not None


@pytest.mark.parametrize("key", ["../x", "a/../../x", "/etc/passwd", "a//b", ".", "", "é"])
def test_file_keys_never_reach_outside_the_directory(tmp_path: Path, key: str) -> None:
    store = FileObjectStore(tmp_path / "root", fsync=False)
    with pytest.raises(ObjectStoreError, match="not a valid object key"):
        store.put(key, b"x")
    with pytest.raises(ObjectStoreError, match="not a valid object key"):
        store.get(key)
    assert not any(tmp_path.rglob("x"))


def test_named_memory_stores_share_their_objects() -> None:
    name = uuid.uuid4().hex
    MemoryObjectStore.named(name).put("k", b"shared")
    assert MemoryObjectStore.named(name).get("k") == b"shared"
    assert MemoryObjectStore.named(f"{name}-other").get("k") is None
    assert MemoryObjectStore().get("k") is None


def test_s3_clients_send_small_bodies_without_waiting_to_continue(s3_endpoint: str) -> None:
    client = s3_client(endpoint_url=s3_endpoint, region_name="us-east-1")
    expects: list[object] = []

    def record(request: Any, **_: Any) -> None:  # runs after the client's own handler
        expects.append(request.headers.get("Expect"))

    client.meta.events.register_last("before-send.s3.PutObject", record)
    store = S3ObjectStore(make_bucket(client), "p", client)
    small, large = os.urandom(60_000), os.urandom(EXPECT_CONTINUE_BYTES + 1)
    store.put("small", small)
    store.put("large", large)
    assert store.get("small") == small and store.get("large") == large
    assert expects == [None, b"100-continue"]


def test_s3_clients_leave_checksums_to_the_objects(s3_endpoint: str) -> None:
    """No CRC32 computed for a PutObject nor asked for on a GetObject: every object
    carries its own check (a frame's CRC32, a claim check's sha256)."""
    client = s3_client(endpoint_url=s3_endpoint, region_name="us-east-1")
    sent: list[tuple[str, list[str]]] = []

    def record(request: Any, **_: Any) -> None:
        names = [k.lower() for k in request.headers if k.lower().startswith("x-amz-checksum")]
        sent.append((request.method, names))

    for operation in ("PutObject", "GetObject"):
        client.meta.events.register_last(f"before-send.s3.{operation}", record)
    store = S3ObjectStore(make_bucket(client), "p", client)
    store.put("k", b"body")
    assert store.get("k") == b"body"
    assert sent == [("PUT", []), ("GET", [])]

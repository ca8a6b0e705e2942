"""ClaimCheckStore: one suite for every backend, and tampering caught on each."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tulip_producer import ClaimCheckStore
from tulip_wire.claimcheck import ClaimCheckUnavailable
from tulip_wire.events import EventError, PayloadRef


@pytest.fixture(scope="module")
def bucket(s3_endpoint: str) -> str:
    name = f"claims-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture(params=["file", "s3", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ClaimCheckStore]:
    if request.param == "file":
        yield ClaimCheckStore.from_url(f"file://{tmp_path}/claims")
    elif request.param == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = request.getfixturevalue("bucket")
        yield ClaimCheckStore.from_url(f"s3://{bucket}/claims", endpoint_url=endpoint)
    else:
        yield ClaimCheckStore.from_url(f"memory://{uuid.uuid4().hex}")


def event_id() -> str:
    return uuid.uuid4().hex


def owner(ref: PayloadRef) -> str:
    """The event id whose object ``ref`` names."""
    return ref.url.rsplit("/", 1)[1].removesuffix(".json")


def test_a_claim_check_serves_only_the_event_that_stored_it(store: ClaimCheckStore) -> None:
    """A forged event reusing a genuine event's payload_ref gets nothing."""
    victim, forger = event_id(), event_id()
    ref = store.put(victim, b'{"namespace": ["acme", "u1"]}')
    with pytest.raises(EventError, match=f"claim check of event {victim}") as e:
        store.get(ref, forger)
    assert e.value.event_id == forger
    assert store.get(ref, victim) == b'{"namespace": ["acme", "u1"]}'


def test_get_returns_exactly_the_bytes_put(store: ClaimCheckStore) -> None:
    data = os.urandom(300_000) + "ünïcode".encode()
    eid = event_id()
    ref = store.put(eid, data)
    assert ref.size == len(data)
    assert ref.sha256 == hashlib.sha256(data).hexdigest()
    assert ref.url == f"{store.root}/{eid[:2]}/{eid}.json"
    assert store.get(ref, owner(ref)) == data


def test_putting_again_replaces_the_object(store: ClaimCheckStore) -> None:
    eid = event_id()
    store.put(eid, b"first")
    ref = store.put(eid, b"second, longer")
    assert store.get(ref, owner(ref)) == b"second, longer"


def test_a_missing_object_is_an_event_error_naming_it(store: ClaimCheckStore) -> None:
    eid = event_id()
    ref = PayloadRef(url=f"{store.root}/{eid[:2]}/{eid}.json", sha256="0" * 64, size=3)
    with pytest.raises(EventError, match="claim-check payload missing") as e:
        store.get(ref, owner(ref))
    assert e.value.event_id == eid and ref.url in e.value.reason


def test_a_wrong_size_or_digest_is_an_event_error(store: ClaimCheckStore) -> None:
    ref = store.put(event_id(), b'{"messages": []}')
    with pytest.raises(EventError, match="bytes, the reference says"):
        store.get(PayloadRef(url=ref.url, sha256=ref.sha256, size=ref.size + 1), owner(ref))
    with pytest.raises(EventError, match="does not match its sha256"):
        store.get(PayloadRef(url=ref.url, sha256="0" * 64, size=ref.size), owner(ref))


@pytest.mark.parametrize("bad", ["", "../../etc/passwd", "A" * 32, "0" * 31, "g" * 32])
def test_event_ids_are_checked_so_keys_are_safe(store: ClaimCheckStore, bad: str) -> None:
    with pytest.raises(EventError, match="32 hex digit event id"):
        store.put(bad, b"x")


@pytest.mark.parametrize(
    "path",
    [
        "../etc/passwd",
        "ab/../../x.json",
        "zz/0123.json",
        "00/11111111111111111111111111111111.json",
    ],
)
def test_references_outside_the_store_are_refused(store: ClaimCheckStore, path: str) -> None:
    for url in (f"{store.root}/{path}", f"file:///etc/{path}"):
        with pytest.raises(EventError, match="is not an object of the store"):
            store.get(PayloadRef(url=url, sha256="0" * 64, size=1), "1" * 32)


def test_a_tampered_file_fails(tmp_path: Path) -> None:
    store = ClaimCheckStore.from_url(f"file://{tmp_path}")
    eid = event_id()
    ref = store.put(eid, b'{"messages": ["hello"]}')
    path = tmp_path / eid[:2] / f"{eid}.json"
    path.write_bytes(b'{"messages": ["HELLO"]}')  # same size, other bytes
    with pytest.raises(EventError, match="does not match its sha256"):
        store.get(ref, owner(ref))
    path.write_bytes(b'{"messages": [')  # truncated
    with pytest.raises(EventError, match="bytes, the reference says"):
        store.get(ref, owner(ref))


def test_a_tampered_s3_object_fails(s3_endpoint: str, bucket: str) -> None:
    store = ClaimCheckStore.from_url(f"s3://{bucket}/tamper", endpoint_url=s3_endpoint)
    eid = event_id()
    ref = store.put(eid, b'{"messages": ["hello"]}')
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    key = f"tamper/{eid[:2]}/{eid}.json"
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == b'{"messages": ["hello"]}'
    client.put_object(Bucket=bucket, Key=key, Body=b'{"messages": ["HELLO"]}')
    with pytest.raises(EventError, match="does not match its sha256"):
        store.get(ref, owner(ref))
    client.delete_object(Bucket=bucket, Key=key)
    with pytest.raises(EventError, match="missing"):
        store.get(ref, owner(ref))


def test_the_s3_endpoint_comes_from_the_environment(
    s3_endpoint: str, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TULIP_S3_ENDPOINT_URL", s3_endpoint)
    store = ClaimCheckStore.from_url(f"s3://{bucket}")
    ref = store.put(event_id(), b"payload")
    assert ref.url.startswith(f"s3://{bucket}/") and store.get(ref, owner(ref)) == b"payload"


def test_memory_stores_on_one_url_share_their_objects() -> None:
    url = f"memory://{uuid.uuid4().hex}"
    ref = ClaimCheckStore.from_url(url).put(event_id(), b"shared")
    assert ClaimCheckStore.from_url(url).get(ref, owner(ref)) == b"shared"
    with pytest.raises(EventError, match="missing"):
        ClaimCheckStore.from_url(url + "-other").get(
            PayloadRef(url=ref.url.replace(url, url + "-other"), sha256=ref.sha256, size=6),
            owner(ref),
        )


@pytest.mark.parametrize("url", ["ftp://host/dir", "file://host/dir", "file:relative", "s3:///x"])
def test_unusable_urls_fail_early(url: str) -> None:
    with pytest.raises(ValueError, match="URL"):
        ClaimCheckStore.from_url(url)


def test_an_unwritable_store_is_unavailable_and_shows_no_credentials(
    tmp_path: Path, s3_endpoint: str
) -> None:
    """A file store whose directory is a file; an S3 endpoint that refuses connections,
    with a password in its URL (reads from it are unavailable too). ``s3_endpoint``
    only sets the AWS credentials, so the client gets as far as connecting."""
    (tmp_path / "a-file").write_bytes(b"")
    secret = "s3cr3t-Pa55"
    s3 = ClaimCheckStore.from_url(
        "s3://b/p", endpoint_url=f"http://user:{secret}@127.0.0.1:9", timeout=1
    )
    stores = {str(tmp_path / "a-file"): ClaimCheckStore.from_url(f"file://{tmp_path}/a-file")}
    for location, store in {**stores, "s3://b": s3}.items():
        with pytest.raises(ClaimCheckUnavailable) as e:
            store.put(event_id(), b"payload")
        assert e.value.url == location and secret not in str(e.value)
    eid = event_id()
    ref = PayloadRef(url=f"{s3.root}/{eid[:2]}/{eid}.json", sha256="0" * 64, size=7)
    with pytest.raises(ClaimCheckUnavailable) as e:
        s3.get(ref, eid)
    assert "127.0.0.1:9" in str(e.value) and secret not in str(e.value)


def test_an_object_larger_than_its_reference_is_refused(store: ClaimCheckStore) -> None:
    eid = event_id()
    ref = store.put(eid, b"x" * 100)
    store.objects.put(f"{eid[:2]}/{eid}.json", b"x" * 1_000_000)  # replaced, bigger
    with pytest.raises(EventError, match="more than the 100 bytes its reference says"):
        store.get(ref, owner(ref))


def test_a_reference_over_the_limit_is_refused_before_any_fetch(s3_endpoint: str) -> None:
    """Nothing is fetched at all: the client sees no GetObject."""
    bucket = f"claims-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    store = ClaimCheckStore.from_url(f"s3://{bucket}/limit", endpoint_url=s3_endpoint)
    fetched = content_lengths(store)
    ref = store.put(event_id(), b"y" * 5000)
    with pytest.raises(EventError, match="5000 bytes, over the 4096 of TULIP_MAX_CLAIM_BYTES"):
        store.get(ref, owner(ref), max_bytes=4096)
    assert fetched == []
    assert store.get(ref, owner(ref), max_bytes=5000) == b"y" * 5000
    assert fetched == [5000]


def content_lengths(store: ClaimCheckStore) -> list[int]:
    """The byte counts the S3 server sends for each GetObject of ``store``'s client."""
    sent: list[int] = []

    def record(http_response: Any, **_: Any) -> None:
        sent.append(int(http_response.headers["Content-Length"]))

    client = store.objects.client  # type: ignore[attr-defined]
    client.meta.events.register("after-call.s3.GetObject", record)
    return sent


def test_an_s3_claim_is_fetched_no_further_than_its_size_plus_one(
    s3_endpoint: str, bucket: str
) -> None:
    store = ClaimCheckStore.from_url(f"s3://{bucket}/bounded", endpoint_url=s3_endpoint)
    fetched = content_lengths(store)
    eid = event_id()
    ref = store.put(eid, b"z" * 100)
    big = os.urandom(4 * 1024 * 1024)  # the object replaced by 4 MiB
    boto3.client("s3", endpoint_url=s3_endpoint).put_object(
        Bucket=bucket, Key=f"bounded/{eid[:2]}/{eid}.json", Body=big
    )
    with pytest.raises(EventError, match="more than the 100 bytes"):
        store.get(ref, owner(ref), max_bytes=32 * 1024 * 1024)
    assert fetched == [101]


def test_a_file_claim_is_read_no_further_than_its_size_plus_one(tmp_path: Path) -> None:
    """The object is a FIFO fed 16 MiB by a writer: a reader that read it whole would
    take all of them; a bounded one stops, and the writer gets a broken pipe after
    no more than the pipe's and the reader's buffers hold."""
    store = ClaimCheckStore.from_url(f"file://{tmp_path}")
    eid = event_id()
    ref = store.put(eid, b"w" * 100)
    path = tmp_path / eid[:2] / f"{eid}.json"
    path.unlink()
    os.mkfifo(path)
    written = [0]

    def feed() -> None:
        chunk = b"w" * 4096
        with contextlib.suppress(BrokenPipeError), path.open("wb", buffering=0) as pipe:
            while written[0] < 16 * 1024 * 1024:
                written[0] += pipe.write(chunk) or 0

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    with pytest.raises(EventError, match="more than the 100 bytes"):
        store.get(ref, owner(ref), max_bytes=32 * 1024 * 1024)
    writer.join(30)
    assert not writer.is_alive()
    assert written[0] < 1024 * 1024  # pipe buffer (64 KiB) + read buffer (8 KiB) + a chunk

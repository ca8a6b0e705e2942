"""Secrets stay out of error text and logs; conversations and secrets on disk are 0600."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tulip_memory.credentials import redact_text, redact_url
from tulip_memory.delta import FileDeltaStorage
from tulip_memory.objects.base import ObjectStoreError
from tulip_memory.objects.s3 import S3ObjectStore, s3_client
from tulip_producer import Producer, ProducerSettings
from tulip_producer.spool import Spool
from tulip_wire.claimcheck import ClaimCheckStore

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://:{SECRET}@cache:6379/0", "redis://***@cache:6379/0"),
        (f"amqp://tulip:{SECRET}@mq:5672//", "amqp://***@mq:5672//"),
        (
            f"postgresql://app:{SECRET}@db/tulip?sslmode=require",
            "postgresql://***@db/tulip?sslmode=require",
        ),
        (
            f"postgresql:///tulip?host=/run&password={SECRET}",
            "postgresql:///tulip?host=/run&password=***",
        ),
        (
            f"https://minio:9000/b?X-Amz-Signature={SECRET}&x=1",
            "https://minio:9000/b?X-Amz-Signature=***&x=1",
        ),
        ("unix:///tmp/redis.sock", "unix:///tmp/redis.sock"),
    ],
)
def test_urls_lose_their_credentials_and_keep_the_rest(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert SECRET not in redact_text(f"cannot reach {url!r}: refused")


@pytest.mark.parametrize("field", ["broker_url", "redis_url", "claim_check_url"])
def test_settings_errors_never_echo_a_password(field: str) -> None:
    with pytest.raises(ValueError) as e:
        fields = {"broker_url": "redis://cache:6379/0", field: f"bogus://user:{SECRET}@host:1/0"}
        ProducerSettings(**fields)  # type: ignore[arg-type]
    assert field in str(e.value) and "host:1" in str(e.value)
    assert SECRET not in str(e.value)


def test_claim_store_errors_never_echo_a_password() -> None:
    with pytest.raises(ValueError) as e:
        ClaimCheckStore.from_url(f"ftp://user:{SECRET}@host/claims")
    assert SECRET not in str(e.value)


def test_object_store_errors_never_echo_an_endpoint_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """botocore names the endpoint URL it could not reach; our error masks its password."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    client = s3_client(
        endpoint_url=f"http://user:{SECRET}@127.0.0.1:9",
        region_name="us-east-1",
        max_attempts=1,
        connect_timeout=1.0,
    )
    with pytest.raises(ObjectStoreError) as e:
        S3ObjectStore("bucket", "", client).get("k")
    assert "127.0.0.1" in str(e.value) and SECRET not in str(e.value)


def test_a_failed_publish_logs_the_event_id_and_error_class_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dead_broker = f"unix://{tmp_path / 'nobody-listens.sock'}"
    settings = ProducerSettings(broker_url=dead_broker, spool_dir=tmp_path / "spool")
    private = "my diagnosis is confidential-7731"
    with caplog.at_level(logging.DEBUG, logger="tulip_producer"), Producer(settings) as producer:
        ids = [
            producer.session_ended(("acme", "u1"), "t", [{"role": "user", "content": private}])
            for _ in range(2)
        ]
        assert producer.spooled == 2
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("tulip_producer")]
    assert any(ids[0] in line and "Error" in line for line in lines), lines
    for line in lines:
        assert private not in line and "acme" not in line and "u1" not in line, line


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A permissive umask, as many containers and CI hosts have."""
    old = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_spool_directory_and_files_are_owner_only(tmp_path: Path, open_umask: None) -> None:
    directory = tmp_path / "spool"
    directory.mkdir(mode=0o755)
    (directory / "spool.sqlite3").touch(mode=0o644)  # left by an older version
    spool = Spool(directory)
    try:
        spool.append('{"conversation": "private"}')
        with spool.draining() as mine:
            assert mine
        assert _mode(directory) == 0o700
        files = sorted(p.name for p in directory.iterdir())
        assert "spool.sqlite3-wal" in files and "spool.drain.lock" in files
        for name in files:
            assert _mode(directory / name) == 0o600, name
    finally:
        spool.close()


def test_claim_checks_are_owner_only(tmp_path: Path, open_umask: None) -> None:
    store = ClaimCheckStore.from_url(f"file://{tmp_path / 'claims'}")
    ref = store.put("ab" * 16, b'{"messages": "private"}')
    assert store.get(ref, "ab" * 16) == b'{"messages": "private"}'
    root = tmp_path / "claims"
    assert _mode(root) == 0o700 and _mode(root / "ab") == 0o700
    assert _mode(root / "ab" / f"{'ab' * 16}.json") == 0o600


async def test_file_checkpoints_are_owner_only(tmp_path: Path, open_umask: None) -> None:
    storage = FileDeltaStorage(tmp_path / "checkpoints", fsync=False)
    await storage.write_objects({"heads/ab/thread": b"state", "log/ab/thread/0/x": b"delta"})
    await storage.copy_objects([("heads/ab/thread", "heads/cd/copy")])
    for path in [tmp_path / "checkpoints", *(tmp_path / "checkpoints").rglob("*")]:
        assert _mode(path) == (0o700 if path.is_dir() else 0o600), path

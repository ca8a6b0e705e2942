"""ProducerSettings and ReaderSettings: defaults, environment, and early failure on bad values."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tulip_producer import Producer, ProducerSettings, ReaderSettings

BROKER = "redis://broker:6379/0"


def test_no_broker_is_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TULIP_BROKER_URL", raising=False)
    with pytest.raises(ValueError, match=r"^TULIP_BROKER_URL is not set.*from_urls"):
        ProducerSettings.from_env({"TULIP_REDIS_URL": "redis://cache:6379/0"})
    with pytest.raises(ValueError, match="TULIP_BROKER_URL is not set"):
        Producer.from_env()
    with pytest.raises(TypeError, match="broker_url"):
        ProducerSettings()  # type: ignore[call-arg]


def test_defaults_besides_the_broker() -> None:
    s = ProducerSettings.from_env({"TULIP_BROKER_URL": "redis://127.0.0.1:6379/0"})
    assert s.broker_url == "redis://127.0.0.1:6379/0"
    assert s.redis_url == s.broker_url
    assert s.spool_dir == Path(".tulip-spool").absolute()
    assert s.extract_shards == 4
    assert s.publish_timeout == 1.0
    assert s.claim_check_url == f"file://{Path('.tulip-spool').absolute()}/claims"
    assert s.max_event_bytes == 256 * 1024
    assert s.s3_endpoint_url is None
    assert not s.broker_is_amqp


def test_values_from_the_environment(tmp_path: Path) -> None:
    s = ProducerSettings.from_env(
        {
            "TULIP_BROKER_URL": "amqp://guest:guest@rabbit:5672//",
            "TULIP_REDIS_URL": "redis://cache:6379/2",
            "TULIP_SPOOL_DIR": str(tmp_path),
            "TULIP_EXTRACT_SHARDS": "16",
            "TULIP_PUBLISH_TIMEOUT": "0.25",
            "TULIP_CHECKPOINT_URL": "s3://bucket/checkpoints/",
            "TULIP_MAX_EVENT_BYTES": "4096",
            "TULIP_S3_ENDPOINT_URL": "http://minio:9000",
        }
    )
    assert s.broker_is_amqp and s.redis_url == "redis://cache:6379/2"
    assert s.spool_dir == tmp_path and s.extract_shards == 16 and s.publish_timeout == 0.25
    assert s.claim_check_url == "s3://bucket/checkpoints/claims"  # beside the checkpoints
    assert s.max_event_bytes == 4096 and s.s3_endpoint_url == "http://minio:9000"


def test_an_explicit_claim_check_url_wins(tmp_path: Path) -> None:
    s = ProducerSettings.from_env(
        {
            "TULIP_BROKER_URL": BROKER,
            "TULIP_CHECKPOINT_URL": "s3://bucket/cp",
            "TULIP_CLAIM_CHECK_URL": "memory://claims",
        }
    )
    assert s.claim_check_url == "memory://claims"
    settings = ProducerSettings(broker_url=BROKER, spool_dir=tmp_path)
    assert settings.claim_check_url == f"file://{tmp_path}/claims"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TULIP_EXTRACT_SHARDS": "four"}, "TULIP_EXTRACT_SHARDS must be an integer"),
        ({"TULIP_EXTRACT_SHARDS": "0"}, "TULIP_EXTRACT_SHARDS must be an integer >= 1"),
        ({"TULIP_PUBLISH_TIMEOUT": "soon"}, "TULIP_PUBLISH_TIMEOUT must be a number"),
        ({"TULIP_PUBLISH_TIMEOUT": "-1"}, "TULIP_PUBLISH_TIMEOUT must be a finite number"),
        ({"TULIP_PUBLISH_TIMEOUT": "nan"}, "TULIP_PUBLISH_TIMEOUT must be a finite number"),
        ({"TULIP_MAX_EVENT_BYTES": "256KiB"}, "TULIP_MAX_EVENT_BYTES must be an integer"),
        ({"TULIP_BROKER_URL": "http://broker"}, "broker_url: unsupported URL scheme 'http'"),
        ({"TULIP_BROKER_URL": "amqp://rabbit//"}, "set TULIP_REDIS_URL when the broker"),
        ({"TULIP_CLAIM_CHECK_URL": "ftp://x/y"}, "claim_check_url: unsupported URL scheme"),
    ],
)
def test_bad_values_fail_early_naming_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProducerSettings.from_env({"TULIP_BROKER_URL": BROKER, **env})


def test_settings_are_frozen() -> None:
    s = ProducerSettings(broker_url=BROKER)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.broker_url = "redis://elsewhere"  # type: ignore[misc]


def test_reader_settings_from_the_environment() -> None:
    assert ReaderSettings.from_env({}) == ReaderSettings()
    assert ReaderSettings().context_length == 128_000
    s = ReaderSettings.from_env(
        {
            "TULIP_BROKER_URL": "amqp://rabbit//",
            "TULIP_CHECKPOINT_URL": "s3://bucket/cp",
            "TULIP_CONTEXT_LENGTH": "4096",
        }
    )
    assert (s.checkpoint_url, s.redis_url, s.context_length) == ("s3://bucket/cp", "", 4096)
    assert ReaderSettings.from_env({"TULIP_BROKER_URL": BROKER}).redis_url == BROKER
    with pytest.raises(
        ValueError, match=r"^TULIP_CONTEXT_LENGTH must be an integer >= 1, got '0'$"
    ):
        ReaderSettings.from_env({"TULIP_CONTEXT_LENGTH": "0"})

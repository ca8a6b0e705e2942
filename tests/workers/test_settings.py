"""Worker settings: every variable a worker reads, parsed once into one frozen object;
a malformed value fails naming the variable, and a secret is never repeated."""

from __future__ import annotations

import dataclasses

import pytest

from tulip_wire.events import CHECKPOINT_SAVED, DEFAULT_MAX_EVENT_BYTES, SESSION_ENDED
from tulip_workers.settings import WorkerSettings

MODEL = "openai/gpt-4o-mini"


def test_defaults_when_nothing_is_set() -> None:
    s = WorkerSettings.from_env({})
    assert s.redis_url is None and s.extractor is None and s.summary_model is None
    assert s.concurrency == {SESSION_ENDED: 16, CHECKPOINT_SAVED: 16}
    assert (s.limits.attempts, s.limits.max_body_bytes) == (4, DEFAULT_MAX_EVENT_BYTES)
    assert s.limits.max_worker_deaths == 3 and s.max_memories == 50
    assert (s.summary_budget.over_tokens, s.summary_budget.step_tokens) == (6000, 1500)
    assert (s.llm.max_inflight, s.llm.lease_seconds) == (8, 60.0)
    assert s.claim_check_url.startswith("file:///") and s.claim_check_url.endswith("/claims")


def test_values_from_the_environment() -> None:
    s = WorkerSettings.from_env(
        {
            "TULIP_BROKER_URL": "redis://broker:6379/0",
            "TULIP_CHECKPOINT_URL": "s3://bucket/cp",
            "TULIP_EXTRACT_CONCURRENCY": "3",
            "TULIP_MAX_WORKER_DEATHS": "5",
            "TULIP_EXTRACT_MODEL": f"  {MODEL} ",
            "TULIP_EXTRACT_TIMEOUT": "7.5",
            "TULIP_EXTRACT_API_KEY": "sk-secret",
            "TULIP_SUMMARY_MODEL": " ",
            "TULIP_SUMMARIZE_OVER_TOKENS": "800",
            "TULIP_LLM_LEASE_SECONDS": "9",
        }
    )
    assert s.redis_url == "redis://broker:6379/0"  # a Redis broker serves as Redis
    assert s.claim_check_url == "s3://bucket/cp/claims"
    assert s.concurrency[SESSION_ENDED] == 3 and s.limits.max_worker_deaths == 5
    assert s.extractor is not None
    assert (s.extractor.model, s.extractor.timeout, s.extractor.api_key) == (
        MODEL,
        7.5,
        "sk-secret",
    )
    assert s.summary_model is None  # blank is unset
    assert s.summary_budget.step_tokens == 200  # a quarter of the threshold
    assert s.llm.lease_seconds == 9.0
    assert "sk-secret" not in repr(s)
    assert WorkerSettings.from_env({"TULIP_BROKER_URL": "amqp://rabbit//"}).redis_url is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TULIP_MAX_MEMORIES": "many"}, r"^TULIP_MAX_MEMORIES must be an integer, got 'many'$"),
        ({"TULIP_EXTRACT_ATTEMPTS": "0"}, r"^TULIP_EXTRACT_ATTEMPTS must be an integer >= 1"),
        ({"TULIP_CHECKPOINT_CONCURRENCY": "-2"}, "TULIP_CHECKPOINT_CONCURRENCY must be"),
        ({"TULIP_MAX_CLAIM_BYTES": "32MiB"}, "TULIP_MAX_CLAIM_BYTES must be an integer"),
        ({"TULIP_EXTRACT_MODEL": MODEL, "TULIP_EXTRACT_TIMEOUT": "0"}, "TULIP_EXTRACT_TIMEOUT"),
        ({"TULIP_SUMMARY_STEP_TOKENS": "x"}, "TULIP_SUMMARY_STEP_TOKENS must be an integer"),
        ({"TULIP_LLM_MAX_INFLIGHT": "0"}, "TULIP_LLM_MAX_INFLIGHT must be an integer >= 1"),
        ({"TULIP_EVENT_SIGNING_KEY": "short"}, "TULIP_EVENT_SIGNING_KEY"),
    ],
)
def test_a_bad_value_fails_naming_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WorkerSettings.from_env(env)


def test_a_secret_is_not_repeated_in_its_error() -> None:
    with pytest.raises(ValueError) as e:
        WorkerSettings.from_env({"TULIP_EVENT_SIGNING_KEY": "hunter2-hunter2"})
    assert "hunter2" not in str(e.value) and "\n" not in str(e.value)


def test_settings_are_frozen() -> None:
    s = WorkerSettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.max_memories = 1  # type: ignore[misc]


def test_operator_settings() -> None:
    from tulip_ops.settings import OpsSettings

    assert OpsSettings.from_env({}) == OpsSettings()
    s = OpsSettings.from_env(
        {
            "TULIP_DATABASE_ADMIN_URL": "postgresql://admin:pw@db/tulip",
            "TULIP_APP_PASSWORD": " spaced ",
            "TULIP_CHECKPOINT_URL": "file:///ckpt",
        }
    )
    assert s.database_admin_url == "postgresql://admin:pw@db/tulip"
    assert (s.app_password, s.ops_password) == (" spaced ", None)  # a password is kept whole
    assert s.checkpoint_url == "file:///ckpt" and "pw" not in repr(s)

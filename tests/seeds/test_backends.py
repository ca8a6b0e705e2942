"""``tulip.memory.backends.S3Backend``: the seed's minimum example and thread lifecycle,
retention rules on the bucket, and the queued path through a real checkpoint worker.
All on moto's ThreadedMotoServer."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from typing import Any

import boto3
import pytest

from tests.pipeline.conftest import Pipeline, broker, pipeline  # noqa: F401
from tulip_memory.backends import S3Backend, install_lifecycle_rules, lifecycle_rules
from tulip_memory.messages import Message, Role
from tulip_memory.registry import get_checkpointer
from tulip_memory.state import AgentState
from tulip_producer import checkpointer as queued_module
from tulip_producer.checkpointer import ThreadStillQueued
from tulip_wire.claimcheck import claim_check_url_from_env


@pytest.fixture(scope="module")
def s3(s3_endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"tulip-threads-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=name)
    return name


def state(text: str, n: int = 1) -> AgentState:
    msgs = [Message(role=Role.USER, content=f"{text} {i}") for i in range(n)]
    return AgentState(messages=tuple(msgs), iterations=n, metadata={"case": text})


async def test_the_minimum_example_and_the_thread_lifecycle(
    bucket: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TULIP_S3_ENDPOINT_URL", s3_endpoint)
    checkpointer = S3Backend(bucket=bucket, prefix="support-bot/")
    try:
        for n in range(1, 4):
            await checkpointer.save(state("refund", n), "ticket-8912-refund")
        await checkpointer.save(state("triage", 9), "case-7731-triage")
        threads = await checkpointer.list_threads()
        assert sorted(threads) == ["case-7731-triage", "ticket-8912-refund"]
        loaded = await checkpointer.load("case-7731-triage")
        assert loaded is not None and len(loaded.messages) == 9
        await checkpointer.copy_thread(
            source_thread_id="case-7731-triage", dest_thread_id="case-7731-triage-replay"
        )
        assert await checkpointer.load("case-7731-triage-replay") == loaded
        assert await checkpointer.delete("case-7731-triage-replay") is True
        assert "case-7731-triage-replay" not in await checkpointer.list_threads()
        assert len(await checkpointer.list_checkpoints("ticket-8912-refund")) == 3
    finally:
        await checkpointer.close()
    keys = [
        o["Key"]
        for o in boto3.client("s3", endpoint_url=s3_endpoint).list_objects_v2(Bucket=bucket)[
            "Contents"
        ]
    ]
    assert keys and all(k.startswith("support-bot/") for k in keys)


async def test_the_registry_builds_an_s3_backend(bucket: str, s3_endpoint: str) -> None:
    checkpointer = get_checkpointer(f"s3:{bucket}/p", endpoint_url=s3_endpoint)
    assert isinstance(checkpointer, S3Backend)
    assert (checkpointer.bucket, checkpointer.prefix) == (bucket, "p/")
    await checkpointer.close()


def test_rules_follow_the_layout() -> None:
    rules = {
        r["ID"]: r for r in lifecycle_rules("prod/", days_until_archive=30, days_until_delete=180)
    }
    assert rules["tulip:prod/:heads"]["Filter"] == {"Prefix": "prod/heads/"}
    assert rules["tulip:prod/:heads"]["Expiration"] == {"Days": 180}
    assert "Transitions" not in rules["tulip:prod/:heads"]
    assert rules["tulip:prod/:log"]["Transitions"] == [{"Days": 30, "StorageClass": "STANDARD_IA"}]
    assert rules["tulip:prod/:summaries"]["Filter"] == {"Prefix": "prod/summaries/"}
    versions = rules["tulip:prod/:heads:versions"]
    assert versions["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    assert versions["Expiration"] == {"ExpiredObjectDeleteMarker": True}
    # Nothing reaches outside the layout's four prefixes, even for the empty prefix.
    everywhere = lifecycle_rules("", days_until_delete=30)
    assert {r["Filter"]["Prefix"] for r in everywhere} == {
        "heads/",
        "log/",
        "names/",
        "summaries/",
    }
    archive_only = lifecycle_rules("", days_until_archive=40)
    assert [r["ID"] for r in archive_only][:2] == ["tulip::log", "tulip::heads:versions"]
    assert len(archive_only) == 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give days_until_archive"),
        ({"days_until_delete": 0}, "positive int"),
        ({"days_until_archive": 60, "days_until_delete": 60}, "less than"),
        ({"days_until_archive": 10}, "30 days"),
        ({"days_until_archive": 40, "archive_storage_class": "TAPE"}, "archive_storage_class"),
    ],
)
def test_impossible_rules_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        lifecycle_rules("p/", **kwargs)


def test_installing_rules_is_idempotent_and_keeps_other_rules(s3: Any, bucket: str) -> None:
    foreign = {
        "ID": "someone-else",
        "Status": "Enabled",
        "Filter": {"Prefix": "tmp/"},
        "Expiration": {"Days": 7},
    }
    s3.put_bucket_lifecycle_configuration(
        Bucket=bucket, LifecycleConfiguration={"Rules": [foreign]}
    )
    first = install_lifecycle_rules(
        s3, bucket, "prod/", days_until_archive=30, days_until_delete=180
    )
    assert first.changed
    after_first = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    ids = sorted(r["ID"] for r in after_first)
    assert ids == sorted(["someone-else", *(r["ID"] for r in first.rules)])
    again = install_lifecycle_rules(
        s3, bucket, "prod/", days_until_archive=30, days_until_delete=180
    )
    assert not again.changed
    assert s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"] == after_first
    # Another prefix adds its own rules; new days replace this prefix's in place.
    install_lifecycle_rules(s3, bucket, "staging/", days_until_delete=14)
    updated = install_lifecycle_rules(s3, bucket, "prod/", days_until_delete=365)
    assert updated.changed
    rules = {r["ID"]: r for r in s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]}
    assert rules["tulip:prod/:heads"]["Expiration"] == {"Days": 365}
    assert rules["tulip:staging/:heads"]["Expiration"] == {"Days": 14}
    assert "tulip:prod/:log" in rules and "Transitions" not in rules["tulip:prod/:log"]
    assert rules["someone-else"]["Expiration"] == {"Days": 7}


async def test_backend_installs_its_prefix_rules_only_with_a_shorter_epoch(
    bucket: str, s3_endpoint: str, s3: Any
) -> None:
    plain = S3Backend(bucket, "prod", endpoint_url=s3_endpoint)
    with pytest.raises(ValueError, match="max_epoch_age"):
        await plain.install_lifecycle(days_until_delete=180)
    await plain.close()
    backend = S3Backend(bucket, "prod", endpoint_url=s3_endpoint, max_epoch_age=timedelta(days=30))
    try:
        with pytest.raises(ValueError, match="days_until_archive"):
            await backend.install_lifecycle(
                days_until_archive=20, days_until_delete=180, archive_storage_class="GLACIER"
            )
        result = await backend.install_lifecycle(days_until_archive=60, days_until_delete=180)
        assert result.changed
        assert not (
            await backend.install_lifecycle(days_until_archive=60, days_until_delete=180)
        ).changed
        rules = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
        assert len(rules) == 8
        assert {r["Filter"]["Prefix"] for r in rules} == {
            "prod/heads/",
            "prod/log/",
            "prod/names/",
            "prod/summaries/",
        }
    finally:
        await backend.close()


def test_queued_refuses_a_bucket_the_workers_do_not_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TULIP_CHECKPOINT_URL", "s3:workers-bucket/prod")
    with pytest.raises(ValueError, match="TULIP_CHECKPOINT_URL"):
        S3Backend(
            "another-bucket", "prod", queued=True, tenant="a", endpoint_url="http://127.0.0.1:9"
        )


def test_queued_needs_a_tenant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TULIP_CHECKPOINT_URL", "s3:workers-bucket/prod")
    with pytest.raises(ValueError, match="tenant"):
        S3Backend("workers-bucket", "prod", queued=True, endpoint_url="http://127.0.0.1:9")


async def test_queued_saves_go_through_a_checkpoint_worker(
    pipeline: Pipeline,  # noqa: F811
    bucket: str,
    s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = {"TULIP_CHECKPOINT_URL": f"s3:{bucket}/queued", "TULIP_S3_ENDPOINT_URL": s3_endpoint}
    env = pipeline.env(**store, TULIP_SPOOL_DIR=str(pipeline.spool))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    queued = S3Backend(bucket, "queued/", queued=True, tenant="acme")
    direct = S3Backend(bucket, "queued/", tenant="acme")  # the bucket, acme's threads
    other = S3Backend(bucket, "queued/", tenant="globex")
    try:
        ids = [await queued.save(state("refund", n), "ticket-8912-refund") for n in (1, 2)]
        # Read your writes before any worker ran; the bucket has nothing yet.
        assert await queued.load("ticket-8912-refund") == state("refund", 2)
        assert await direct.load("ticket-8912-refund") is None
        with pytest.raises(ValueError, match="assigns checkpoint ids"):
            await queued.save(state("refund", 3), "ticket-8912-refund", "my-id")
        pipeline.start_shards(role="checkpoint", **store)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if await direct.load("ticket-8912-refund") == state("refund", 2):
                break
            await asyncio.sleep(0.3)
        assert await direct.load("ticket-8912-refund") == state("refund", 2)
        assert set(await queued.list_checkpoints("ticket-8912-refund")) == set(ids)
        assert await queued.list_threads() == ["ticket-8912-refund"]
        assert await queued.load("ticket-8912-refund", ids[0]) == state("refund", 1)
        assert await other.load("ticket-8912-refund") is None  # same id, another tenant
        assert await other.list_threads() == []
    finally:
        await queued.close()
        await direct.close()
        await other.close()


async def test_a_queued_delete_waits_for_the_queued_saves_and_nothing_comes_back(
    pipeline: Pipeline,  # noqa: F811
    bucket: str,
    s3_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The seed's delete on the queued path: saves still in the queue are written
    first, then the thread is deleted, and no late save brings it back."""
    store = {"TULIP_CHECKPOINT_URL": f"s3:{bucket}/del", "TULIP_S3_ENDPOINT_URL": s3_endpoint}
    env = pipeline.env(**store, TULIP_SPOOL_DIR=str(pipeline.spool))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    queued = S3Backend(bucket, "del/", queued=True, tenant="acme")
    direct = S3Backend(bucket, "del/", tenant="acme")
    try:
        for n in (1, 2, 3):
            await queued.save(state("gdpr", n), "user-asked-to-forget")
        monkeypatch.setattr(queued_module, "DELETE_DRAIN_TIMEOUT", 0.5)
        with pytest.raises(ThreadStillQueued, match="nothing deleted"):
            await queued.delete("user-asked-to-forget")  # no worker yet
        assert await queued.load("user-asked-to-forget") == state("gdpr", 3)
        pipeline.start_shards(role="checkpoint", **store)
        monkeypatch.setattr(queued_module, "DELETE_DRAIN_TIMEOUT", 120.0)
        assert await queued.delete("user-asked-to-forget")
        assert await queued.load("user-asked-to-forget") is None
        assert await direct.load("user-asked-to-forget") is None
        assert await queued.list_threads() == []
    finally:
        await queued.close()
        await direct.close()


def test_claim_checks_live_beside_checkpoints_in_either_spelling(tmp_path: Any) -> None:
    """Workers and producers derive the claim-check root from TULIP_CHECKPOINT_URL,
    which may use the registry's ``s3:bucket/prefix`` spelling."""
    for url in ("s3:b/prod", "s3://b/prod", "s3:b/prod/"):
        assert claim_check_url_from_env({"TULIP_CHECKPOINT_URL": url}) == "s3://b/prod/claims"
    found = claim_check_url_from_env({"TULIP_CHECKPOINT_URL": f"file:{tmp_path}"})
    assert found == f"file://{tmp_path}/claims"

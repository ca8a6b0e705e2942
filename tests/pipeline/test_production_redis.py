"""The whole pipeline on production Redis spellings: a TLS broker (rediss://, verified
against a self-signed CA) and a Sentinel-managed one. Real shard workers, real Postgres."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.pipeline.conftest import Pipeline
from tests.support.pg import app_store
from tests.support.redis_servers import TlsRedis, sentinel_url, tls_redis
from tests.support.services import Postgres
from tests.support.workers import WorkerFactory
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_ops.provision import migrate_now

__all__ = ["sentinel_url", "tls_redis"]  # fixtures


def _run(pipeline: Pipeline) -> None:
    pipeline.start_shards()
    namespaces = [("acme", "users", f"u{i}") for i in range(6)]
    with pipeline.producer() as producer:
        ids = [
            producer.session_ended(
                ns, f"t-{ns[2]}", [Message(role=Role.USER, content=f"My home city is City{i}.")]
            )
            for i, ns in enumerate(namespaces)
        ]
        state = AgentState(messages=(Message(role=Role.USER, content="a saved turn"),))
        producer.checkpoint_saved("t-saved", state, tenant="acme")
        assert producer.flush(timeout=30)
        assert producer.spooled == 0
    with pipeline.reader() as reader:
        # No checkpoint worker runs: the state comes from the pending overlay on this Redis.
        assert reader.load("t-saved", tenant="acme") == state
        pipeline.wait_applied(reader, ids, "acme")
        for i, ns in enumerate(namespaces):
            found = {m.key: m.content for m in reader.recall(ns, None, limit=5)}
            assert f"City{i}" in found["home-city"], found


def _pipeline(url: str, postgres: Postgres, workers: WorkerFactory, tmp_path: Path) -> Pipeline:
    table = f"pipe_{uuid.uuid4().hex[:8]}"
    # Migrated as the owner before any worker (the application role) uses it.
    migrate_now(app_store(postgres.app_dsn, table=table, embedder=HashingEmbedder(384)))
    return Pipeline(url, postgres.app_dsn, postgres.admin_dsn, table, tmp_path / "spool", workers)


@pytest.mark.slow
def test_pipeline_over_tls(
    tls_redis: TlsRedis, postgres: Postgres, workers: WorkerFactory, tmp_path: Path
) -> None:
    _run(_pipeline(tls_redis.url(), postgres, workers, tmp_path))


@pytest.mark.slow
def test_pipeline_through_sentinel(
    sentinel_url: str, postgres: Postgres, workers: WorkerFactory, tmp_path: Path
) -> None:
    _run(_pipeline(sentinel_url, postgres, workers, tmp_path))

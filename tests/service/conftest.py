"""One real stack per test module: Redis (broker), the session's Postgres, file
checkpoints, one extract and one checkpoint worker (one shard each), and the HTTP
service on a port of its own, all started here and stopped at the end."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.pg import app_store
from tests.support.service import ServiceProcess, mint_key
from tests.support.services import Postgres
from tests.support.workers import WorkerFactory, worker_env
from tulip_memory.embeddings import HashingEmbedder
from tulip_ops.dev.embedded import EmbeddedRedis
from tulip_ops.provision import migrate_now

#: How long a checked key is trusted by the module's service (revocation tests wait it out).
KEY_CACHE_SECONDS = 0.5


@dataclass
class Stack:
    env: dict[str, str]
    admin_dsn: str
    service: ServiceProcess
    workers: WorkerFactory

    @property
    def url(self) -> str:
        return self.service.url

    def client(self, key: str | None) -> httpx.Client:
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def key(self, tenant: str, scope: str = "all") -> str:
        return mint_key(self.admin_dsn, tenant, scope)[0]

    def wait_done(self, client: httpx.Client, event_id: str, timeout: float = 60.0) -> str:
        """Until the event is applied, superseded or dead; its state."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state: str = client.get(f"/v1/events/{event_id}").json()["state"]
            if state in ("applied", "superseded", "dead"):
                return state
            time.sleep(0.1)
        raise AssertionError(f"event {event_id} not done in {timeout}s")


def stack_env(broker_url: str, postgres: Postgres, data: Path, **extra: str) -> dict[str, str]:
    table = f"http_{uuid.uuid4().hex[:8]}"
    migrate_now(app_store(postgres.app_dsn, table=table, embedder=HashingEmbedder(384)))
    return worker_env(
        TULIP_BROKER_URL=broker_url,
        TULIP_REDIS_URL=broker_url,
        TULIP_DATABASE_URL=postgres.app_dsn,
        TULIP_MEMORY_TABLE=table,
        TULIP_EXTRACT_SHARDS="1",
        TULIP_CHECKPOINT_SHARDS="1",
        TULIP_CHECKPOINT_URL=f"file://{data / 'checkpoints'}",
        TULIP_SPOOL_DIR=str(data / "spool"),
        TULIP_HTTP_KEY_CACHE_SECONDS=str(KEY_CACHE_SECONDS),
        **extra,
    )


@pytest.fixture(scope="module")
def stack(
    postgres: Postgres, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    """The module's stack; a module whose events need not be applied sets
    ``WORKERS = False`` and gets no workers (seconds saved at start and stop)."""
    data = tmp_path_factory.mktemp("http")
    broker = EmbeddedRedis(data / "redis").start()
    env = stack_env(broker.url, postgres, data, TULIP_HTTP_MAX_BODY_BYTES=str(256 * 1024))
    workers = WorkerFactory(env, data)
    service = ServiceProcess(env, data / "service.log")
    try:
        if getattr(request.module, "WORKERS", True):
            workers.start_all(
                [
                    workers.solo("extract-0", ["memory.extract.0"]),
                    workers.solo("checkpoint-0", ["memory.checkpoint.0"]),
                ]
            )
        service.start()
        yield Stack(env, postgres.admin_dsn, service, workers)
    finally:
        service.stop()
        workers.stop_all()
        broker.stop()


def problem(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    """``response`` is problem details of ``kind`` with ``status``; its body."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/problem+json", response.headers
    body: dict[str, Any] = response.json()
    assert body["type"] == f"urn:tulip-memory:problem:{kind}", body
    assert body["status"] == status and body["title"] and body["detail"], body
    assert body["instance"] == response.request.url.path, body
    return body

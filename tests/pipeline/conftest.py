"""A broker of the pipeline tests' own, and the settings their workers run with."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.pg import app_store
from tests.support.services import Postgres
from tests.support.workers import WorkerFactory, WorkerProcess
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.registry import get_checkpointer
from tulip_ops.dev.embedded import EmbeddedRedis
from tulip_ops.provision import migrate_now
from tulip_producer import Producer
from tulip_producer.reader import AsyncReader, Reader
from tulip_wire.endpoints import redis_client
from tulip_wire.pending import pending_states
from tulip_wire.published import published_events

SHARDS = 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """A Redis for this module's broker (each test's ``pipeline`` empties it first)."""
    server = EmbeddedRedis(tmp_path_factory.mktemp("broker")).start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Pipeline:
    broker_url: str
    database_url: str
    admin_url: str
    table: str
    spool: Path
    workers: WorkerFactory

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "TULIP_BROKER_URL": self.broker_url,
            "TULIP_REDIS_URL": self.broker_url,
            "TULIP_DATABASE_URL": self.database_url,
            "TULIP_MEMORY_TABLE": self.table,
            "TULIP_EXTRACT_SHARDS": str(SHARDS),
            "TULIP_CHECKPOINT_SHARDS": str(SHARDS),
            "TULIP_CHECKPOINT_URL": f"file://{self.spool.parent / 'checkpoints'}",
            "TULIP_EXTRACT_ATTEMPTS": "3",
            **extra,
        }

    def start_shards(self, role: str = "extract", **extra: str) -> None:
        """Every shard's ``role`` worker, started side by side."""
        self.workers.start_all([self.shard(k, role, **extra) for k in range(SHARDS)])

    def start_shard(self, k: int, role: str = "extract", **extra: str) -> None:
        self.workers.start_all([self.shard(k, role, **extra)])

    def shard(self, k: int, role: str = "extract", **extra: str) -> WorkerProcess:
        """Shard ``k``'s ``role`` worker, not started yet (``workers.start_all``)."""
        return self.workers.solo(f"{role}-{k}", [f"memory.{role}.{k}"], **self.env(**extra))

    def producer(self, signing_key: str | None = None) -> Producer:
        return Producer.from_urls(
            self.broker_url,
            self.broker_url,
            spool_dir=self.spool,
            extract_shards=SHARDS,
            checkpoint_shards=SHARDS,
            signing_key=signing_key,
        )

    def reader(self) -> Reader:
        env = self.env()
        return Reader(
            AsyncReader(
                app_store(self.database_url, table=self.table, embedder=_embedder()),
                checkpointer=get_checkpointer(env["TULIP_CHECKPOINT_URL"]),
                pending=pending_states(self.broker_url),
                published=published_events(self.broker_url),
            )
        )

    def wait_applied(
        self, reader: Reader, ids: list[str], tenant: str, timeout: float = 120.0
    ) -> None:
        """Until ``tenant``'s events ``ids`` are applied or dead (status is per tenant).

        One event is asked about at a time, the first not known done: a poll is one
        status query, not one per event still pending (hundreds, each a transaction,
        beside the workers under test), and the events behind it are mostly done by
        the time it is."""
        deadline = time.monotonic() + timeout
        done = ("applied", "superseded", "dead")
        for n, event_id in enumerate(ids):
            while reader.status(event_id, tenant=tenant).state not in done:
                if time.monotonic() >= deadline:
                    raise AssertionError(
                        f"event {event_id} ({n + 1} of {len(ids)}) never applied in {timeout}s"
                    )
                time.sleep(0.1)


def empty_broker(broker_url: str) -> None:
    """Empty the module's broker for the next test: what an earlier one left there is
    not this test's (a killed worker's semaphore leases, which would hold LLM slots
    until they run out, a minute by default; messages still queued or unacked, such as
    a reindex job's batches a resume sent again after a SIGKILL, which name an earlier
    table's job ids and would reach this test's workers)."""
    client = redis_client(broker_url)
    try:
        client.flushdb()
    finally:
        client.close()


def _embedder() -> HashingEmbedder:
    return HashingEmbedder(384)


@pytest.fixture
def pipeline(
    broker: EmbeddedRedis, postgres: Postgres, workers: WorkerFactory, tmp_path: Path
) -> Pipeline:
    empty_broker(broker.url)
    table = f"pipe_{uuid.uuid4().hex[:8]}"
    # Migrated as the owner before any worker (the application role) uses it.
    migrate_now(app_store(postgres.app_dsn, table=table, embedder=_embedder()))
    return Pipeline(
        broker.url, postgres.app_dsn, postgres.admin_dsn, table, tmp_path / "spool", workers
    )

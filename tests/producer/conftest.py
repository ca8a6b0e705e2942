"""Producer fixtures: a broker of our own on the session Redis, producers that close.

The producer tests publish to the real shard queue names (``memory.extract.<k>``), so
they use a Redis database of their own (``PRODUCER_TEST_DB``) on the session Redis and
empty those queues before each test: other suites' messages and ours never meet.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.producer.queues import with_db
from tulip_ops.dev.embedded import EmbeddedRedis
from tulip_producer import Producer, ProducerSettings
from tulip_wire.routing import ShardRouter
from tulip_wire.topology import EXTRACT_QUEUE_PREFIX

PRODUCER_TEST_DB = 11
SHARDS = 4

MakeProducer = Callable[..., Producer]


@pytest.fixture
def broker_url(redis_url: str) -> str:
    """The session Redis, database ``PRODUCER_TEST_DB``, with empty extract queues."""
    url = with_db(redis_url, PRODUCER_TEST_DB)
    client = redis.Redis.from_url(url)
    try:
        client.delete(*ShardRouter(EXTRACT_QUEUE_PREFIX, SHARDS).queues())
    finally:
        client.close()
    return url


@pytest.fixture
def make_producer(tmp_path: Path) -> Iterator[MakeProducer]:
    """Producers on the given broker with a spool under ``tmp_path``; closed afterwards."""
    made: list[Producer] = []

    def make(broker: str, **options: Any) -> Producer:
        options.setdefault("spool_dir", tmp_path / "spool")
        options.setdefault("extract_shards", SHARDS)
        producer = Producer(ProducerSettings(broker_url=broker, **options))
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close(timeout=2)


@dataclass
class RestartableRedis:
    """An embedded Redis that can be stopped and started again on the same data.

    Each start gets a new socket file; ``url`` names a symlink that always points at the
    current one, so clients keep one URL across restarts (as with a host name).
    """

    data_dir: Path
    link: Path
    server: EmbeddedRedis | None = field(default=None)

    @property
    def url(self) -> str:
        return f"unix://{self.link}"

    def start(self) -> RestartableRedis:
        self.server = EmbeddedRedis(self.data_dir).start()
        self.link.unlink(missing_ok=True)
        self.link.symlink_to(self.server.url.removeprefix("unix://"))
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


@pytest.fixture
def restartable_redis(tmp_path: Path) -> Iterator[RestartableRedis]:
    server = RestartableRedis(tmp_path / "redis", tmp_path / "broker.sock").start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(tmp_path / "redis", ignore_errors=True)

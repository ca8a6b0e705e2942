"""``tulip-memory metrics``: the pipeline's state as Prometheus metrics, read at scrape time.

Flower's own ``/metrics`` counts tasks it has seen; it cannot say how many wait in a
queue. This exporter asks the broker and Redis directly on every scrape:

- ``tulip_queue_depth{queue}``: messages waiting in each declared queue (not yet
  delivered), on Redis or RabbitMQ;
- ``tulip_queue_unacked{queue}`` (Redis): delivered, not yet acknowledged (in work);
- ``tulip_oldest_pending_seconds{queue}``: age of the next event of each shard queue
  (from its envelope's publish time; 0 when the queue is empty; Redis);
- ``tulip_dead_letters_total{reason_class}``: dead letters filed, by tenant-free class
  (``tulip_workers.tally``);
- ``tulip_llm_inflight`` and ``tulip_llm_max_inflight``: live slots of the LLM
  semaphore, and its limit;
- ``tulip_producer_spool_depth{producer}``: events spooled by each producer that
  reports it (``Producer`` does, every few seconds while it runs);
- ``tulip_events_total{queue,outcome}``: events the workers are done with, by queue and
  outcome (``applied``, ``superseded``, ``duplicate``, ``dead``);
- ``tulip_event_latency_seconds{queue}``: a histogram of the seconds from an event's
  publish to its outcome (both counted by the workers in Redis, ``tulip_workers.tally``);
- ``tulip_broker_up``: 1 when the broker answered this scrape;
- ``tulip_build_info{version,python}``: 1, labelled with what runs;
- ``tulip_shard_owner{queue,worker}`` (Redis): 1 for the worker holding each shard
  queue's lease (its fencing token as ``tulip_shard_fencing_token{queue}``); a shard
  queue with no owner is absent, so ``absent()`` or a count under the shard count
  alerts;
- ``tulip_shard_standby{queue,worker}`` (Redis): 1 for each standby worker of a shard
  queue (:mod:`tulip_workers.lease`).
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import logging
import platform
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from celery import Celery
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from tulip_memory.credentials import redact_url
from tulip_wire import celeryconfig, topology
from tulip_wire.endpoints import redis_client
from tulip_wire.env import redis_url
from tulip_workers.settings import LLM_MAX_INFLIGHT
from tulip_workers.tally import DeadLetterTally, OutcomeTally

log = logging.getLogger(__name__)


def declared_queues() -> list[topology.QueueSpec]:
    return topology.declared_queues(celeryconfig.EXTRACT_SHARDS, celeryconfig.CHECKPOINT_SHARDS)


@dataclass(eq=False)  # registries key collectors by identity
class PipelineCollector(Collector):
    """Collects every metric above from ``app``'s broker and the ``redis`` client."""

    app: Celery
    redis: Any  # redis.Redis, or None without a Redis
    queues: list[topology.QueueSpec]
    llm_limit: int

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "tulip_queue_depth", "Messages waiting in the queue", labels=["queue"]
        )
        unacked = GaugeMetricFamily(
            "tulip_queue_unacked", "Delivered, not yet acknowledged (Redis)", labels=["queue"]
        )
        oldest = GaugeMetricFamily(
            "tulip_oldest_pending_seconds",
            "Age of the next event waiting in the shard queue (0 when empty)",
            labels=["queue"],
        )
        up = GaugeMetricFamily("tulip_broker_up", "1 when the broker answered this scrape")
        shards = ShardGauges()
        try:
            self._broker(depth, unacked, oldest, shards)
            up.add_metric([], 1)
        except Exception as e:
            log.warning("broker %s: %s", redact_url(celeryconfig.broker_url), e)
            up.add_metric([], 0)
        build = GaugeMetricFamily(
            "tulip_build_info",
            "1, labelled with the tulip-memory version and the Python it runs on",
            labels=["version", "python"],
        )
        build.add_metric([_version(), platform.python_version()], 1)
        yield from (depth, unacked, oldest, up, build, shards.owner, shards.token, shards.standby)
        if self.redis is not None:
            yield from self._redis_metrics()

    def _broker(self, depth: Any, unacked: Any, oldest: Any, shards: ShardGauges) -> None:
        with self.app.connection_for_read() as connection:
            connection.ensure_connection(max_retries=1)
            channel = connection.default_channel
            redis_broker = connection.transport.driver_type == "redis"
            in_work = _unacked_per_queue(channel) if redis_broker else {}
            for spec in self.queues:
                depth.add_metric([spec.name], _depth(channel, spec.name))
                if not redis_broker:
                    continue
                unacked.add_metric([spec.name], in_work.get(spec.name, 0))
                if spec.ordered:
                    oldest.add_metric([spec.name], _oldest_age(channel, spec.name))
                    shards.add(channel, spec.name)

    def _redis_metrics(self) -> Iterable[Metric]:
        dead = CounterMetricFamily(
            "tulip_dead_letters", "Dead letters filed, by reason class", labels=["reason_class"]
        )
        inflight = GaugeMetricFamily(
            "tulip_llm_inflight", "Model calls in flight across all workers (live LLM slots)"
        )
        limit = GaugeMetricFamily(
            "tulip_llm_max_inflight",
            "The cap on model calls in flight across all workers (TULIP_LLM_MAX_INFLIGHT)",
        )
        outcomes = CounterMetricFamily(
            "tulip_events",
            "Events a worker is done with, by queue and outcome "
            "(applied, superseded, duplicate, dead)",
            labels=["queue", "outcome"],
        )
        latency = HistogramMetricFamily(
            "tulip_event_latency_seconds",
            "Seconds from an event's publish to its outcome (applied or superseded), by queue",
            labels=["queue"],
        )
        spool = GaugeMetricFamily(
            "tulip_producer_spool_depth", "Events in a producer's spool", labels=["producer"]
        )
        removed = CounterMetricFamily(
            "tulip_retention_removed", "Rows and threads retention removed", labels=["kind"]
        )
        last = GaugeMetricFamily(
            "tulip_retention_last_run_timestamp_seconds", "When a retention run last finished"
        )
        try:
            for name, value in self.redis.hgetall(topology.RETENTION_TALLY_KEY).items():
                key = name.decode() if isinstance(name, bytes) else str(name)
                if key == "last_run":
                    last.add_metric([], float(value))
                else:
                    removed.add_metric([key], float(value))
            for kind, count in DeadLetterTally(self.redis).counts().items():
                dead.add_metric([kind], count)
            inflight.add_metric([], _live_leases(self.redis, f"{topology.SEMAPHORE_PREFIX}llm"))
            for producer, count in _spool_reports(self.redis):
                spool.add_metric([producer], count)
            tally = OutcomeTally(self.redis)
            for queue, outcome, count in tally.outcomes():
                outcomes.add_metric([queue, outcome], count)
            for queue, (buckets, total) in tally.latencies().items():
                latency.add_metric([queue], buckets, total)
        except Exception as e:
            log.warning("redis: %s", e)
            return
        limit.add_metric([], self.llm_limit)
        yield from (dead, inflight, limit, spool, outcomes, latency, removed, last)


def _version() -> str:
    try:
        return importlib.metadata.version("tulip-memory")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
        return "unknown"


class ShardGauges:
    """Each shard queue's owner, fencing token and standbys, from its lease keys."""

    def __init__(self) -> None:
        self.owner = GaugeMetricFamily(
            "tulip_shard_owner",
            "1 for the worker holding the shard queue's lease",
            labels=["queue", "worker"],
        )
        self.token = GaugeMetricFamily(
            "tulip_shard_fencing_token",
            "The fencing token of the shard queue's lease (one more at every takeover)",
            labels=["queue"],
        )
        self.standby = GaugeMetricFamily(
            "tulip_shard_standby",
            "1 for each standby worker of the shard queue",
            labels=["queue", "worker"],
        )

    def add(self, channel: Any, queue: str) -> None:
        client, prefix = _raw_client(channel)
        lease = client.hgetall(prefix + topology.lease_key(queue))
        owner, token = lease.get(b"owner"), lease.get(b"token")
        if owner is not None and token is not None:
            self.owner.add_metric([queue, owner.decode()], 1)
            self.token.add_metric([queue], int(token))
        now = int(time.time() * 1000)
        for worker in client.zrangebyscore(prefix + topology.standby_key(queue), now, "+inf"):
            self.standby.add_metric([queue, worker.decode()], 1)


def _depth(channel: Any, queue: str) -> int:
    if hasattr(channel, "_size"):  # kombu's Redis channel: every priority list summed
        return int(channel._size(queue))
    try:
        return int(channel.queue_declare(queue=queue, passive=True).message_count)
    except Exception:  # not declared yet: nothing waits in it
        return 0


def _raw_client(channel: Any) -> tuple[Any, str]:
    import redis

    return redis.Redis(connection_pool=channel.pool), str(channel.global_keyprefix or "")


def _unacked_per_queue(channel: Any) -> dict[str, int]:
    client, prefix = _raw_client(channel)
    counts: dict[str, int] = {}
    for entry in client.hvals(prefix + channel.unacked_key):
        try:
            _, _, routing_key = json.loads(entry)
        except (ValueError, TypeError):
            continue
        counts[routing_key] = counts.get(routing_key, 0) + 1
    return counts


def _oldest_age(channel: Any, queue: str) -> float:
    """Seconds since the next message's event was published; consumed from the right."""
    client, prefix = _raw_client(channel)
    raw = client.lindex(prefix + queue, -1)
    if raw is None:
        return 0.0
    ts = _published_at(raw)
    return max(0.0, time.time() - ts) if ts is not None else 0.0


def _published_at(raw: bytes) -> float | None:
    """The ``ts`` of the envelope a kombu Redis message carries, if it carries one."""
    try:
        message = json.loads(raw)
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        return float(json.loads(args[0])["ts"])
    except (ValueError, TypeError, KeyError, IndexError):
        return None


def _live_leases(client: Any, key: str) -> int:
    seconds, micros = client.time()
    return int(client.zcount(key, f"({seconds * 1000 + micros // 1000}", "+inf"))


def _spool_reports(client: Any) -> Iterator[tuple[str, int]]:
    for key in client.scan_iter(match=f"{topology.SPOOL_REPORT_PREFIX}*", count=100):
        value = client.get(key)
        if value is None:
            continue
        name = key.decode() if isinstance(key, bytes) else str(key)
        yield name.removeprefix(topology.SPOOL_REPORT_PREFIX), int(value)


def registry() -> CollectorRegistry:
    """A registry of the pipeline collector, configured from the environment."""
    app = Celery("tulip_metrics")
    app.config_from_object("tulip_wire.celeryconfig")
    url = redis_url()
    collector = PipelineCollector(
        app=app,
        redis=None if url is None else redis_client(url, socket_timeout=5),
        queues=declared_queues(),
        llm_limit=LLM_MAX_INFLIGHT.read(),
    )
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg


def serve(port: int, address: str = "127.0.0.1") -> tuple[Any, Any]:
    """Serve ``/metrics`` on ``address:port`` in a background thread; returns the
    server and its thread (``server.shutdown()`` stops it)."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=address, registry=registry())

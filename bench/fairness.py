"""Fair under a noisy neighbour, bounded at millions of users.

Starts its own Postgres + pgvector and Redis (embedded, in a temp dir) unless given
``--admin-dsn``/``--broker-url``, and a model stub that answers every extraction after
``--latency`` L (default 0.5 s). Two extract shards, each one shard worker in the layout
of ``tulip-memory worker extract --concurrency C`` (default C = 4, so a worker reserves
4·C = 16 messages). Measures, in one run:

1. a victim namespace's event latency, publish -> applied (its ledger row), p50 and p99
   over sequential samples: idle; while (a) one namespace on the victim's shard has 10x
   and 100x 4·C events queued; while (b) one tenant has 100 namespaces x 5 events queued
   across all shards (the LLM cap C, contended). Target: p99 <= 2 x idle p50 + L. The
   10x case is run once more without parking (``TULIP_KEY_RESERVATION=0``), the layout
   before it, for the ratio;
2. Redis: bytes per namespace and per thread while active and after the idle period
   (counters, markers and pending lists all expire; target 0 after), and ``used_memory``
   after ``--namespaces`` (1,000,000) namespaces published once each, their messages
   consumed by a no-op drain, against the bound the active bytes per namespace give;
3. ``Producer.session_ended`` p50 with the per-tenant quota on (never exceeded) and off,
   interleaved.

Usage: python -m bench.fairness [--quick] [--concurrency 4] [--latency 0.5] [--samples 20]
                                [--namespaces 1000000] [--admin-dsn DSN] [--broker-url URL]
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import contextlib
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import redis

from bench._services import WorkerPool, bench_main, progress
from bench.pipeline import (
    SESSION,
    THREAD,
    Bench,
    extraction_model,
    open_bench,
)
from tulip_producer.quota import PublishQuota
from tulip_wire.events import SESSION_ENDED, namespace_key
from tulip_wire.routing import ShardRouter
from tulip_wire.topology import EXTRACT_QUEUE_PREFIX, shard_queue
from tulip_workers.keyed import BUFFER_PER_SLOT
from tulip_workers.settings import CONCURRENCY, KEY_RESERVATION, LLM_MAX_INFLIGHT

SHARDS = 2
#: The shortest idle period of the Redis measurement (counters, markers, pending lists):
#: longer when publishing its keys takes longer, so none expires before it is counted.
MIN_IDLE_TTL = 5.0
#: Threads publishing the used_memory run's namespaces.
PUBLISHERS = 4


@dataclass(frozen=True)
class Victim:
    label: str
    samples: list[float]  # seconds, publish -> applied

    def pct(self, q: float) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Footprint:
    namespaces: int
    threads: int
    active_ns: float  # bytes per namespace while in use (its counter, one event's marker)
    active_thread: float  # per thread (its counter, one save's marker and pending entry)
    per_event: float  # bytes per further event of a namespace (its published marker)
    idle_ns: float  # after the idle period
    idle_ttl: float
    keys_left: list[str]  # tulip:* keys after the idle period (none per key)


@dataclass(frozen=True)
class Million:
    namespaces: int
    seconds: float
    used_before: int
    used_after: int
    bound: int


@dataclass(frozen=True)
class Quota:
    samples: int
    off_p50: float  # ms
    on_p50: float
    off_p99: float
    on_p99: float


@dataclass(frozen=True)
class Report:
    concurrency: int
    latency: float
    victims: list[Victim]
    footprint: Footprint
    million: Million | None
    quota: Quota


@dataclass(frozen=True)
class Options:
    concurrency: int
    latency: float
    samples: int
    namespaces: int
    admin_dsn: str | None
    broker_url: str | None

    @classmethod
    def parse(cls, argv: Sequence[str] | None = None) -> Options:
        parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
        parser.add_argument("--quick", action="store_true", help="fewer samples, 100k namespaces")
        parser.add_argument("--concurrency", type=int, default=4, help="C of each shard worker")
        parser.add_argument("--latency", type=float, default=0.5, help="model stub delay L, s")
        parser.add_argument("--samples", type=int, help="victim events per scenario (20)")
        parser.add_argument("--namespaces", type=int, help="the used_memory run (1000000; 0: skip)")
        parser.add_argument("--admin-dsn", help="an existing Postgres with pgvector (superuser)")
        parser.add_argument("--broker-url", help="an existing Redis the bench has to itself")
        a = parser.parse_args(argv)
        million = 100_000 if a.quick else 1_000_000
        return cls(
            concurrency=a.concurrency,
            latency=a.latency,
            samples=a.samples or (8 if a.quick else 20),
            namespaces=million if a.namespaces is None else a.namespaces,
            admin_dsn=a.admin_dsn,
            broker_url=a.broker_url,
        )


def on_shard(shard: int, count: int, tag: str, tenant: str) -> list[tuple[str, ...]]:
    """``count`` namespaces of ``tenant`` that route to ``shard``."""
    router = ShardRouter(EXTRACT_QUEUE_PREFIX, SHARDS)
    found: list[tuple[str, ...]] = []
    i = 0
    while len(found) < count:
        ns = (tenant, "users", f"{tag}-{i}")
        if router.shard(namespace_key(ns)) == shard:
            found.append(ns)
        i += 1
    return found


@contextlib.contextmanager
def shard_workers(bench: Bench, name: str, c: int, **env: str) -> Iterator[WorkerPool]:
    """One threads worker per shard at C, ready (a warm-up event each applied); the
    broker is emptied when they stop, whatever they left queued or parked."""
    settings = {**bench.worker_env(), CONCURRENCY[SESSION_ENDED].name: str(c), **env}
    settings["TULIP_EXTRACT_SHARDS"] = str(SHARDS)
    with WorkerPool(bench.services.tmp / f"logs-{name}", settings) as pool:
        for k in range(SHARDS):
            queue = shard_queue(EXTRACT_QUEUE_PREFIX, k)
            pool.start("tulip_workers.app", f"{name}-{k}", queue, "threads", c * BUFFER_PER_SLOT)
        bench.model.default_chat = extraction_model(0.0)
        warm = [on_shard(k, 1, f"warm-{name}", "warm")[0] for k in range(SHARDS)]
        with bench.producer(SHARDS) as producer:
            ids = [producer.session_ended(ns, THREAD, SESSION) for ns in warm]
        bench.ledger.wait_applied(ids, 180.0, pool.check)
        try:
            yield pool
        finally:
            pool.stop(timeout=5)
            bench.redis.flushdb()


def victim_latency(
    bench: Bench, pool: WorkerPool, label: str, samples: int, noise: Sequence[tuple[str, ...]]
) -> Victim:
    """``samples`` events of one victim namespace on shard 0, one after the other, each
    timed from its publish to its ledger row, after ``noise`` (one event per entry) was
    published."""
    progress(f"{label}: {len(noise)} noisy events queued, {samples} victim events ...")
    (victim,) = on_shard(0, 1, f"victim-{uuid.uuid4().hex[:6]}", "victim")
    with bench.producer(SHARDS) as producer:
        for ns in noise:
            producer.session_ended(ns, THREAD, SESSION)
        times = []
        for _ in range(samples):
            started = time.perf_counter()
            event = producer.session_ended(victim, THREAD, SESSION)
            times.append(bench.ledger.wait_applied([event], 600.0, pool.check) - started)
    return Victim(label, times)


def measure_victims(bench: Bench, options: Options) -> list[Victim]:
    c, n = options.concurrency, options.samples
    buffer = BUFFER_PER_SLOT * c
    cap = {LLM_MAX_INFLIGHT.name: str(c)}  # the cap contended: C calls over both shards
    victims = []
    with shard_workers(bench, "idle", c, **cap) as pool:
        bench.model.default_chat = extraction_model(options.latency)
        victims.append(victim_latency(bench, pool, "idle", n, []))
    for times in (10, 100):
        with shard_workers(bench, f"hot{times}", c, **cap) as pool:
            bench.model.default_chat = extraction_model(options.latency)
            hot = on_shard(0, 1, f"hot{times}", "noisy") * (times * buffer)
            label = f"(a) one namespace, {times}x 4C queued"
            victims.append(victim_latency(bench, pool, label, n, hot))
    with shard_workers(bench, "crowd", c, **cap) as pool:
        bench.model.default_chat = extraction_model(options.latency)
        crowd = [("noisy", "users", f"crowd-{i}") for i in range(100)] * 5
        label = "(b) one tenant, 100 ns x 5 queued"
        victims.append(victim_latency(bench, pool, label, n, crowd))
    with shard_workers(bench, "unparked", c, **cap, **{KEY_RESERVATION.name: "0"}) as pool:
        bench.model.default_chat = extraction_model(options.latency)
        hot = on_shard(0, 1, "unparked", "noisy") * (10 * buffer)
        label = "(a) 10x 4C, no parking (before)"
        victims.append(victim_latency(bench, pool, label, 1, hot))
    return victims


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def expire_idle(client: redis.Redis, within: float) -> None:
    """Until every key of ours with a TTL has expired (a SCAN reaps expired keys as it
    meets them; Redis's own expiry cycle samples)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(client.pttl(k) > 0 for k in client.scan_iter(match="tulip:*", count=1000)):
            return
        time.sleep(0.2)


def measure_footprint(bench: Bench, count: int) -> Footprint:
    """Per-namespace and per-thread state: ``count`` namespaces each published once,
    ``count`` threads each saved once, nothing consuming (the queues are emptied before
    each reading: a message is not per-key state); TTLs of :data:`IDLE_TTL`."""
    progress(f"Redis footprint: {count} namespaces, {count} threads ...")
    client = bench.redis
    client.flushdb()
    with bench.producer(SHARDS) as producer:  # how long a publish takes on this host now
        started = time.perf_counter()
        for i in range(100):
            producer.session_ended(("tenant-w", "users", f"warm-{i}"), THREAD, SESSION)
        each = (time.perf_counter() - started) / 100
    client.flushdb()
    idle_ttl = max(MIN_IDLE_TTL, 3 * 3 * count * each)
    ttl = {"seq_idle_ttl": idle_ttl, "status_ttl": idle_ttl, "pending_ttl": idle_ttl}
    queues = [*ShardRouter(EXTRACT_QUEUE_PREFIX, SHARDS).queues()]
    queues += [shard_queue("memory.checkpoint", k) for k in range(SHARDS)]
    base = used_memory(client)
    with bench.producer(SHARDS, checkpoint_shards=SHARDS, **ttl) as producer:
        for i in range(count):
            producer.session_ended(("tenant-a", "users", f"user-{i}"), THREAD, SESSION)
        client.delete(*queues)
        after_ns = used_memory(client)
        for _ in range(count):
            producer.session_ended(("tenant-a", "users", "user-0"), THREAD, SESSION)
        client.delete(*queues)
        after_events = used_memory(client)
        for i in range(count):
            producer.checkpoint_saved(f"thread-{i}", {"messages": []}, tenant="tenant-a")
    client.delete(*queues)
    after_threads = used_memory(client) - (after_events - after_ns)
    expire_idle(client, 30 + idle_ttl)
    idle = used_memory(client)
    left = sorted(k.decode() for k in client.scan_iter(match="tulip:*", count=1000))
    return Footprint(
        count, count, (after_ns - base) / count, (after_threads - after_ns) / count,
        (after_events - after_ns) / count, max(0, idle - base) / (2 * count), idle_ttl, left,
    )  # fmt: skip


def measure_million(bench: Bench, count: int, per_ns: float) -> Million:
    """``count`` namespaces published once each, a no-op drain consuming the queues (a
    thread empties them as they fill), and ``used_memory`` against the bound
    ``count`` x the active bytes per namespace (+ what Redis held before)."""
    progress(f"used_memory: {count} namespaces published once each ...")
    client = bench.redis
    client.flushdb()
    if bench.services.embedded_redis:  # no RDB snapshots of a million keys mid-run
        client.config_set("save", "")
    queues = ShardRouter(EXTRACT_QUEUE_PREFIX, SHARDS).queues()
    stop = threading.Event()

    def drain() -> None:  # the no-op consumer: what a worker takes off is gone
        drainer = redis.Redis.from_url(bench.services.broker_url)
        while not stop.wait(0.2):
            drainer.delete(*queues)
        drainer.delete(*queues)

    before = used_memory(client)
    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    started = time.perf_counter()

    def publish(part: int) -> None:  # a producer per thread: the round trips overlap
        spool = bench.services.tmp / f"spool-m{part}"
        with bench.producer(SHARDS, seq_idle_ttl=3600.0, spool_dir=spool) as producer:
            for i in range(part, count, PUBLISHERS):
                producer.session_ended(("tenant-m", f"user-{i}"), THREAD, SESSION)
                if i and i % 100_000 == 0:
                    progress(f"  {i} published ({time.perf_counter() - started:.0f} s)")

    publishers = [
        threading.Thread(target=publish, args=(n,), daemon=True) for n in range(PUBLISHERS)
    ]
    for t in publishers:
        t.start()
    for t in publishers:
        t.join()
    seconds = time.perf_counter() - started
    stop.set()
    drainer.join()
    after = used_memory(client)
    client.flushdb(asynchronous=True)  # a million keys: not within a socket timeout
    return Million(count, seconds, before, after, int(before + 1.1 * count * per_ns))


def measure_quota(bench: Bench, samples: int) -> Quota:
    """Interleaved ``session_ended`` p50 with the quota on (a rate never reached) and off."""
    progress(f"quota on vs off: {samples} interleaved publishes ...")
    bench.redis.flushdb()
    on_quota = PublishQuota(rate=1e9, burst=10**9)
    off: list[float] = []
    on: list[float] = []
    with (
        bench.producer(SHARDS) as plain,
        bench.producer(SHARDS, quota=on_quota, spool_dir=bench.services.tmp / "spool-q") as metered,
    ):
        for i in range(samples + 50):
            for producer, times in ((plain, off), (metered, on)):
                t = time.perf_counter()
                producer.session_ended(("tenant-q", "users", f"u{i % 64}"), THREAD, SESSION)
                if i >= 50:  # warmed up
                    times.append(time.perf_counter() - t)
            if i % 500 == 0:
                bench.redis.delete(*ShardRouter(EXTRACT_QUEUE_PREFIX, SHARDS).queues())
    off.sort()
    on.sort()

    def ms(values: list[float], q: float) -> float:
        return 1000 * values[int(q * (len(values) - 1))]

    return Quota(samples, ms(off, 0.5), ms(on, 0.5), ms(off, 0.99), ms(on, 0.99))


def run(stack: contextlib.ExitStack, options: Options) -> Report:
    bench = open_bench(
        stack, options.admin_dsn, options.broker_url, SHARDS,
        prefix="tulip-bench-fair-", keep_alive=True,
    )  # fmt: skip
    victims = measure_victims(bench, options)
    quota = measure_quota(bench, 2000 if options.samples >= 20 else 500)
    footprint = measure_footprint(bench, 10_000 if options.samples >= 20 else 3000)
    million = None
    if options.namespaces:
        million = measure_million(bench, options.namespaces, footprint.active_ns)
    return Report(options.concurrency, options.latency, victims, footprint, million, quota)


def print_report(report: Report) -> None:
    c, latency = report.concurrency, report.latency
    idle = report.victims[0]
    target = 2 * idle.pct(0.5) + latency
    print(f"\nVictim namespace latency, publish -> applied: {SHARDS} shard workers at C = {c} "
          f"(4C = {BUFFER_PER_SLOT * c}), LLM cap {c}, model L = {latency:g} s")  # fmt: skip
    print(f"  target: p99 <= 2 x idle p50 + L = {target:.2f} s")
    print(f"  {'scenario':36} {'n':>3} {'p50 s':>7} {'p99 s':>7} {'p50/idle':>9} "
          f"{'p99/target':>10}")  # fmt: skip
    for v in report.victims:
        print(
            f"  {v.label:36} {len(v.samples):3d} {v.pct(0.5):7.2f} {v.pct(0.99):7.2f} "
            f"{v.pct(0.5) / idle.pct(0.5):9.2f} {v.pct(0.99) / target:10.2f}"
        )
    print("  p99 of n sequential samples (n = 20: the largest); ratio <= 1.00 meets the target")
    f = report.footprint
    print(f"\nRedis per key ({f.namespaces} namespaces published once, {f.threads} threads "
          f"saved once; idle period {f.idle_ttl:.0f} s)")  # fmt: skip
    print(f"  while active: {f.active_ns:7.0f} B per namespace, {f.active_thread:7.0f} B per "
          "thread (counter, published marker; a thread's pending list)")  # fmt: skip
    print(f"  each further event of a namespace: {f.per_event:7.0f} B (its published marker, "
          f"for TULIP_STATUS_TTL)")  # fmt: skip
    print(f"  after the idle period: {f.idle_ns:7.1f} B per namespace or thread "
          f"(target 0); tulip:* keys left: {len(f.keys_left)} {f.keys_left[:4]}")  # fmt: skip
    m = report.million
    if m is not None:
        used = (m.used_after - m.used_before) / 2**20
        print(f"\nused_memory, {m.namespaces} namespaces published once each "
              f"({m.seconds:.0f} s, {m.namespaces / m.seconds:.0f}/s), no-op drain")  # fmt: skip
        print(f"  before {m.used_before / 2**20:.1f} MiB, after {m.used_after / 2**20:.1f} MiB "
              f"(+{used:.1f} MiB, {(m.used_after - m.used_before) / m.namespaces:.0f} B each); "
              f"bound {m.bound / 2**20:.1f} MiB: "
              f"{'within' if m.used_after <= m.bound else 'OVER'}")  # fmt: skip
    q = report.quota
    print(f"\nPublish with the per-tenant quota on vs off ({q.samples} interleaved samples)")
    print(f"  off: p50 {q.off_p50:.3f} ms, p99 {q.off_p99:.3f} ms; on: p50 {q.on_p50:.3f} ms, "
          f"p99 {q.on_p99:.3f} ms; on/off p50 {q.on_p50 / q.off_p50:.3f}x")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    options = Options.parse(argv)
    return bench_main(lambda stack: run(stack, options), print_report)


if __name__ == "__main__":
    sys.exit(main())

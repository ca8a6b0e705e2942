"""Ordered, not serial: one shard worker process with C events in flight, against the
solo layout (one event per process) at the same RAM, and the publish path against raw
LPUSH and Celery's own ``apply_async``.

Starts its own Postgres + pgvector and Redis (embedded, in a temp dir) unless given
``--admin-dsn``/``--broker-url``, and a model stub that answers every extraction after
``--latency`` L (default 1 s), over persistent connections as a provider's API serves
them. Measures, in one run:

1. one shard worker in the layout of ``tulip-memory worker extract --concurrency C``
   (``-P threads -c 4C``, C running): events/s against the ideal C / L, the peak number of
   model calls in flight (the model stub counts them), process RSS per in-flight event,
   and worker CPU per event; the same again with ``TULIP_EXTRACT_CLIENT=litellm``
   (the stub is an OpenAI-compatible server, so by default the OpenAI SDK calls it:
   :mod:`tulip_memory.chat`), what a provider only litellm speaks costs;
2. the solo layout (``-P solo``, one worker per shard) with as many shards as fit in the
   threaded worker's RSS (at least one): its events/s at the same RAM;
3. ``Producer.session_ended`` p50, a raw ``LPUSH`` of the same message bytes, and a
   Celery ``apply_async`` of the same body to a queue on the same broker, interleaved;
4. one checkpoint shard worker at the same C (``tulip-memory worker checkpoint
   --concurrency C``) writing delta checkpoints to an S3 API (a moto server in a
   subprocess, unless ``--s3-endpoint`` names one): checkpoints/s against C divided by
   one S3 PUT's p50 on the same server (the rate if the PUTs were all it waited on),
   and its CPU per checkpoint.

Usage: python -m bench.concurrency [--quick] [--concurrency 32] [--latency 1.0]
                                   [--events N] [--admin-dsn DSN] [--broker-url URL]
                                   [--s3-endpoint URL]
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
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

import psutil
from celery import Celery

from bench._services import (
    BenchError,
    WorkerPool,
    bench_main,
    progress,
)
from bench.checkpoints import moto_server
from bench.pipeline import (
    SESSION,
    THREAD,
    Bench,
    CpuMeter,
    Latency,
    balanced_namespaces,
    extraction_model,
    open_bench,
)
from tulip_memory.chat import Client
from tulip_memory.messages import Message, Role
from tulip_memory.objects.s3 import s3_client
from tulip_memory.state import AgentState
from tulip_producer import Producer
from tulip_wire.celeryconfig import kombu_queue
from tulip_wire.endpoints import kombu_url
from tulip_wire.events import CHECKPOINT_SAVED, SESSION_ENDED, namespace_key
from tulip_wire.routing import ShardRouter
from tulip_wire.topology import CHECKPOINT_QUEUE_PREFIX, EXTRACT_QUEUE_PREFIX, shard_queue
from tulip_workers.keyed import BUFFER_PER_SLOT
from tulip_workers.settings import CONCURRENCY, EXTRACT_CLIENT

MAX_SOLO = 32
#: About what one save of a growing thread writes (a segment and the head).
CHECKPOINT_OBJECT_BYTES = 2048
RSS_SAMPLE = 0.2


@dataclass(frozen=True)
class Layout:
    name: str
    processes: int
    concurrency: int  # events one process may run at once
    events: int
    seconds: float
    peak_inflight: int
    rss_mb: float  # the worker processes' RSS at the busiest sample
    cpu_ms_per_event: float
    steady: float  # events/s between the 10th and the 90th percentile of applied times

    @property
    def rate(self) -> float:
        return self.events / self.seconds


@dataclass(frozen=True)
class Publish:
    samples: int
    message_bytes: int
    lpush: Latency
    apply_async: Latency
    session_ended: Latency
    #: ``session_ended`` through Celery's ``send_task`` (``direct_publish=False``).
    send_task_path: Latency


@dataclass(frozen=True)
class Checkpoints:
    """One checkpoint shard worker at C on an S3 API."""

    concurrency: int
    saves: int
    seconds: float
    put: Latency  # one PUT of a checkpoint-sized object on the same server
    cpu_ms_per_save: float

    @property
    def rate(self) -> float:
        return self.saves / self.seconds

    @property
    def ideal(self) -> float:
        return 1000 * self.concurrency / self.put.p50  # Latency is in ms


@dataclass(frozen=True)
class Report:
    latency: float
    concurrency: int
    threaded: Layout
    via_litellm: Layout  # the same, its model calls through litellm
    solo: Layout
    solo_rss_mb: float
    publish: Publish
    checkpoints: Checkpoints


class RssSampler:
    """The highest summed RSS of some processes (and their children) while it runs."""

    def __init__(self, pids: Sequence[int]) -> None:
        self._procs = [psutil.Process(pid) for pid in pids]
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(RSS_SAMPLE):
            self.peak = max(self.peak, rss_mb(self._procs))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


def rss_mb(procs: Sequence[psutil.Process]) -> float:
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
            total += sum(c.memory_info().rss for c in proc.children(recursive=True))
    return total / 2**20


def run_layout(
    bench: Bench,
    name: str,
    shards: int,
    pool_kind: str,
    concurrency: int,
    events: int,
    latency: float,
    client: Client = "auto",
) -> Layout:
    """Warm the workers up, then publish ``events`` at once and time them to the ledger;
    ``client``: the workers' model client (``TULIP_EXTRACT_CLIENT``)."""
    env = {
        **bench.worker_env(),
        CONCURRENCY[SESSION_ENDED].name: str(concurrency),
        EXTRACT_CLIENT.name: client,
    }
    threads = concurrency * BUFFER_PER_SLOT if pool_kind == "threads" else 1
    with WorkerPool(bench.services.tmp / f"logs-{name}", env) as pool:
        for k in range(shards):
            pool.start(
                "tulip_workers.app", f"{name}-{k}", f"memory.extract.{k}", pool_kind, threads
            )
        progress(f"{name}: {shards} worker(s), warming up ...")
        bench.model.default_chat = extraction_model(0.0)
        warm = balanced_namespaces(shards, 1, f"warm-{name}")
        with bench.producer(shards) as producer:
            ids = [producer.session_ended(ns, THREAD, SESSION) for ns in warm]
        bench.event_ids += ids
        bench.ledger.wait_applied(ids, 180.0, pool.check)
        bench.model.default_chat = extraction_model(latency)
        bench.model.reset()
        per_shard = max(1, 2 * concurrency if pool_kind == "threads" else 8)
        namespaces = balanced_namespaces(shards, per_shard, f"run-{name}")
        with bench.producer(shards) as producer:  # connected before the clock starts
            sampler = RssSampler(pool.pids)
            meter = CpuMeter(pool.pids, bench.servers)
            started = time.perf_counter()
            ids = [
                producer.session_ended(namespaces[i % len(namespaces)], THREAD, SESSION)
                for i in range(events)
            ]
        bench.event_ids += ids
        timeout = 120 + 4 * events * latency / (shards * concurrency)
        done = bench.ledger.wait_applied(ids, timeout, pool.check)
        cpu = meter.stop()
        peak_rss = sampler.stop()
    seconds = done - started
    return Layout(
        name, shards, concurrency, events, seconds, bench.model.max_inflight, peak_rss,
        1000 * cpu.workers / events, steady_rate(bench.ledger.applied_times(ids)),
    )  # fmt: skip


def steady_rate(applied: Sequence[float]) -> float:
    """Events/s while the worker is saturated: between the 10th and the 90th percentile
    of the applied times. A burst starts with the buffer filling and the first calls
    opening connections, and ends with the last few namespaces' events, in order, on
    fewer than C slots; the whole-burst rate counts both."""
    first, last = len(applied) // 10, len(applied) - 1 - len(applied) // 10
    span = applied[last] - applied[first]
    return (last - first) / span if span > 0 else float("nan")


def put_latency(endpoint: str, bucket: str, size: int, samples: int = 200) -> Latency:
    """PUTs of ``size`` bytes to ``bucket``: what one checkpoint write waits on at least."""
    client = s3_client(endpoint_url=endpoint, region_name="us-east-1")
    body, times = os.urandom(size), []
    for i in range(samples):
        t = time.perf_counter()
        client.put_object(Bucket=bucket, Key=f"put-probe/{i}", Body=body)
        times.append(time.perf_counter() - t)
    return Latency.of(times)


def run_checkpoints(bench: Bench, endpoint: str, concurrency: int, saves: int) -> Checkpoints:
    """Warm one checkpoint worker up, then save ``saves`` checkpoints over 2·C threads
    (each save one message longer than the thread's last) and time them to the ledger."""
    bucket = f"tulip-bench-{uuid.uuid4().hex[:8]}"
    s3_client(endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    env = {
        **bench.worker_env(),
        CONCURRENCY[CHECKPOINT_SAVED].name: str(concurrency),
        "TULIP_CHECKPOINT_URL": f"s3:{bucket}/bench",
        "TULIP_S3_ENDPOINT_URL": endpoint,
        "TULIP_CHECKPOINT_SHARDS": "1",
    }
    threads = [(f"ckpt-{i}", AgentState()) for i in range(2 * concurrency)]
    with WorkerPool(bench.services.tmp / "logs-checkpoint", env) as pool:
        queue = shard_queue(CHECKPOINT_QUEUE_PREFIX, 0)
        worker = pool.start("tulip_workers.app", "checkpoint-0", queue, "threads",
                            concurrency * BUFFER_PER_SLOT)  # fmt: skip
        progress(f"checkpoints: 1 worker at C={concurrency}, warming up ...")

        def save_round(producer: Producer, tenant: str) -> list[str]:
            ids: list[str] = []
            for i, (thread, state) in enumerate(threads):
                turn = Message(role=Role.USER, content=f"{thread} says {len(state.messages)}")
                threads[i] = (thread, replace(state, messages=(*state.messages, turn)))
                ids.append(producer.checkpoint_saved(thread, threads[i][1], tenant=tenant))
            return ids

        tenant = f"bench-ckpt-{uuid.uuid4().hex[:6]}"
        with bench.producer(1, checkpoint_shards=1) as producer:
            saved = len(save_round(producer, tenant))
        try:
            bench.ledger.wait_type_applied(CHECKPOINT_SAVED, tenant, saved, 180.0, pool.check)
        except BenchError as e:
            raise BenchError(f"{e}; the checkpoint worker's log ends:\n{worker.tail()}") from e
        meter = CpuMeter(pool.pids, bench.servers)
        started = time.perf_counter()
        timed = 0
        with bench.producer(1, checkpoint_shards=1) as producer:
            while timed < saves:
                timed += len(save_round(producer, tenant))
        done = bench.ledger.wait_type_applied(
            CHECKPOINT_SAVED, tenant, saved + timed, 120 + timed / 5, pool.check
        )
        cpu = meter.stop()
    put = put_latency(endpoint, bucket, CHECKPOINT_OBJECT_BYTES)
    return Checkpoints(concurrency, timed, done - started, put, 1000 * cpu.workers / timed)


def idle_solo_rss(bench: Bench) -> float:
    """One warmed-up solo shard worker's RSS: what the solo layout pays per event in flight."""
    with WorkerPool(bench.services.tmp / "logs-probe", bench.worker_env()) as pool:
        pool.start("tulip_workers.app", "probe-0", "memory.extract.0")
        bench.model.default_chat = extraction_model(0.0)
        with bench.producer(1) as producer:
            ids = [producer.session_ended(("bench0", "users", "probe"), THREAD, SESSION)]
        bench.event_ids += ids
        bench.ledger.wait_applied(ids, 180.0, pool.check)
        return rss_mb([psutil.Process(pid) for pid in pool.pids])


def measure_publish(bench: Bench, samples: int) -> Publish:
    """Interleaved: LPUSH of a real message's bytes, ``apply_async`` of the same body,
    and one ``session_ended``; nobody consumes these queues."""
    router = ShardRouter(EXTRACT_QUEUE_PREFIX, 1)
    namespaces = balanced_namespaces(1, 64, "publish")
    app = Celery("bench-apply-async", set_as_current=False)
    app.config_from_object("tulip_wire.celeryconfig")
    app.conf.broker_url = kombu_url(bench.services.broker_url)
    floor_key, celery_queue = "bench:concurrency:floor", "bench.concurrency.apply"
    declared = app.conf.task_queues
    app.conf.task_queues = (*declared, kombu_queue(celery_queue, ordered=False, amqp=False))
    lpush, apply, publish, general = [], [], [], []
    try:
        with (
            bench.producer(1) as producer,
            bench.producer(
                1, direct_publish=False, spool_dir=bench.services.tmp / "spool-general"
            ) as slow,
        ):
            producer.session_ended(namespaces[0], THREAD, SESSION)
            message = cast(bytes, bench.redis.lindex(router.queue(namespace_key(namespaces[0])), 0))
            body = message.decode()
            app.send_task("bench.nothing", args=[body], queue=celery_queue)  # connects
            for i in range(samples):
                t = time.perf_counter()
                bench.redis.lpush(floor_key, message)
                lpush.append(time.perf_counter() - t)
                t = time.perf_counter()
                app.send_task("bench.nothing", args=[body], queue=celery_queue)
                apply.append(time.perf_counter() - t)
                t = time.perf_counter()
                producer.session_ended(namespaces[i % len(namespaces)], THREAD, SESSION)
                publish.append(time.perf_counter() - t)
                t = time.perf_counter()
                slow.session_ended(namespaces[i % len(namespaces)], THREAD, SESSION)
                general.append(time.perf_counter() - t)
            if producer.spooled or slow.spooled:
                raise BenchError(f"{producer.spooled} events were spooled: the broker failed")
    finally:
        app.close()
        bench.redis.delete(floor_key, celery_queue, *router.queues())
    return Publish(
        samples,
        len(message),
        Latency.of(lpush),
        Latency.of(apply),
        Latency.of(publish),
        Latency.of(general),
    )


@dataclass(frozen=True)
class Options:
    concurrency: int
    latency: float
    events: int
    publishes: int
    admin_dsn: str | None
    broker_url: str | None
    s3_endpoint: str | None

    @classmethod
    def parse(cls, argv: Sequence[str] | None = None) -> Options:
        parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
        parser.add_argument("--quick", action="store_true", help="C=8, L=0.5 s, fewer events")
        parser.add_argument("--concurrency", type=int, help="C of the threaded worker (32)")
        parser.add_argument("--latency", type=float, help="model stub delay L, s (1.0)")
        parser.add_argument("--events", type=int, help="events per layout (8 C)")
        parser.add_argument("--publishes", type=int, help="publish samples (2000; quick 300)")
        parser.add_argument("--admin-dsn", help="an existing Postgres with pgvector (superuser)")
        parser.add_argument("--broker-url", help="an existing Redis the bench has to itself")
        parser.add_argument("--s3-endpoint", help="an S3 API for checkpoints (else moto)")
        a = parser.parse_args(argv)
        c = a.concurrency or (8 if a.quick else 32)
        return cls(
            concurrency=c,
            latency=a.latency if a.latency is not None else (0.5 if a.quick else 1.0),
            events=a.events or 8 * c,
            publishes=a.publishes or (300 if a.quick else 2000),
            admin_dsn=a.admin_dsn,
            broker_url=a.broker_url,
            s3_endpoint=a.s3_endpoint,
        )


def run(stack: contextlib.ExitStack, options: Options) -> Report:
    bench = open_bench(
        stack, options.admin_dsn, options.broker_url, MAX_SOLO,
        prefix="tulip-bench-conc-", keep_alive=True,
    )  # fmt: skip
    progress(f"publish latency: {options.publishes} samples ...")
    publish = measure_publish(bench, options.publishes)
    c, latency = options.concurrency, options.latency
    threaded = run_layout(bench, "threads", 1, "threads", c, options.events, latency)
    progress(f"  threads C={c}: {threaded.rate:.1f} events/s, RSS {threaded.rss_mb:.0f} MB")
    via_litellm = run_layout(
        bench, "threads-litellm", 1, "threads", c, options.events, latency, "litellm"
    )
    progress(f"  threads C={c}, litellm: {via_litellm.rate:.1f} events/s")
    solo_rss = idle_solo_rss(bench)
    fit = max(1, min(MAX_SOLO, int(threaded.rss_mb // solo_rss)))
    solo = run_layout(bench, "solo", fit, "solo", 1, max(8 * fit, 16), latency)
    progress(f"  solo x{fit}: {solo.rate:.1f} events/s, RSS {solo.rss_mb:.0f} MB")
    endpoint = options.s3_endpoint
    if endpoint is None:
        for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            os.environ.setdefault(var, "bench")
        endpoint = stack.enter_context(moto_server())
    checkpoints = run_checkpoints(bench, endpoint, c, options.events)
    progress(f"  checkpoints C={c}: {checkpoints.rate:.1f}/s")
    return Report(latency, c, threaded, via_litellm, solo, solo_rss, publish, checkpoints)


def print_report(report: Report) -> None:
    t, s, p = report.threaded, report.solo, report.publish
    ideal = report.concurrency / report.latency
    print(f"\nOne shard worker at C = {report.concurrency}, model latency L = {report.latency:g} s")
    print(
        f"  {'layout':28} {'procs':>5} {'events':>6} {'events/s':>9} {'vs C/L':>7} "
        f"{'steady/s':>8} {'vs C/L':>7} "
        f"{'peak in flight':>14} {'RSS MB':>7} {'MB/in-flight':>12} {'CPU ms/ev':>9}"
    )
    rows = (
        ("threads (-P threads)", t, ideal),
        ("  model calls via litellm", report.via_litellm, ideal),
        ("solo (-P solo)", s, s.processes / report.latency),
    )
    for label, run, target in rows:
        per = run.rss_mb / max(1, run.peak_inflight)
        print(
            f"  {label:28} {run.processes:5d} {run.events:6d} "
            f"{run.rate:9.2f} {run.rate / target:7.3f} "
            f"{run.steady:8.2f} {run.steady / target:7.3f} {run.peak_inflight:14d} "
            f"{run.rss_mb:7.0f} {per:12.2f} {run.cpu_ms_per_event:9.2f}"
        )
    print("  events/s: the whole burst, published at once; steady/s: between the 10th and "
          "90th percentile of its applied times (the worker saturated)")  # fmt: skip
    print(f"  threads ÷ solo at the same RAM: {t.rate / s.rate:.1f}x events/s "
          f"(a solo worker idles at {report.solo_rss_mb:.0f} MB; {s.processes} fit in "
          f"{t.rss_mb:.0f} MB)")  # fmt: skip
    print(f"\nPublish, {p.samples} interleaved samples of a {p.message_bytes}-byte message")
    print(f"  {'':26} {'p50 ms':>8} {'p99 ms':>8} {'p50 ratio':>10}")
    for label, lat in (("raw LPUSH", p.lpush), ("Celery apply_async", p.apply_async),
                       ("Producer.session_ended", p.session_ended),
                       ("  via send_task (2 trips)", p.send_task_path)):  # fmt: skip
        print(f"  {label:26} {lat.p50:8.3f} {lat.p99:8.3f} {lat.p50 / p.lpush.p50:9.2f}x")
    print(f"  session_ended ÷ apply_async: {p.session_ended.p50 / p.apply_async.p50:.2f}x")
    k = report.checkpoints
    print(f"\nOne checkpoint shard worker at C = {k.concurrency}, delta checkpoints on an S3 API")
    print(f"  one S3 PUT of {CHECKPOINT_OBJECT_BYTES} bytes: p50 {k.put.p50:.2f} ms, "
          f"p99 {k.put.p99:.2f} ms; C / PUT p50 = {k.ideal:.0f} checkpoints/s")  # fmt: skip
    print(f"  {k.saves} checkpoints in {k.seconds:.1f} s: {k.rate:.1f}/s = "
          f"{k.rate / k.ideal:.3f} of C / PUT p50; "
          f"worker CPU {k.cpu_ms_per_save:.2f} ms each")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    options = Options.parse(argv)
    return bench_main(lambda stack: run(stack, options), print_report)


if __name__ == "__main__":
    sys.exit(main())

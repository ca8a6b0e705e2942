"""The HTTP service under load, against its floor and the in-process Python API.

One run, one machine, embedded Postgres and Redis (or ``--database-url`` /
``--broker-url``), the service as uvicorn runs it (uvloop, httptools), aiohttp clients:

1. ``POST /v1/sessions`` at ``--clients`` (64) concurrent clients for ``--seconds``:
   throughput and p50/p99, against ``POST /bench/noop`` of the same server (same
   middleware and key check, no publish: the floor, target >= 0.6x its throughput) and
   against ``Producer.session_ended`` in process on as many threads.
2. ``GET /v1/memories`` (recall with a query, a namespace of ``--memories`` memories)
   against ``AsyncReader.recall`` in process at the same concurrency, and
   ``GET /bench/noop`` (the round trip): target HTTP p50 <= 1.3x in-process p50 +
   the no-op round trip's p50.
3. Soak: ``--soak-seconds`` (60) at ``--soak-clients`` (1000) connections posting
   sessions, then workers apply the backlog: 0 errors, every accepted event applied
   (ledger rows, read as the operator role).

    .venv/bin/python -m bench.http [--seconds 10] [--soak-seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench._services import (
    ROOT,
    BenchError,
    Services,
    WorkerPool,
    bench_main,
    deferred_interrupts,
    open_services,
    progress,
)
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.manager import Memory, MemoryType
from tulip_memory.store import PgMemory
from tulip_memory.store.postgres.admin import as_operator
from tulip_ops.dev.embedded import run_async
from tulip_ops.dev.flower import free_port
from tulip_ops.provision import configured_store, migrate_now
from tulip_producer import AsyncReader, Producer, ProducerSettings
from tulip_service import keys

TENANT = "bench"
SHARDS = 2
WORDS = ["teal", "pilot", "lisbon", "coffee", "jazz", "chess", "python", "hiking", "sushi"]


@dataclass
class Sample:
    """Latencies (s) and errors of one phase."""

    name: str
    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.seconds

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


#: Users the publish phases spread over (one namespace each): a chat backend's traffic is
#: many conversations at once, not one (one namespace's events are published in order,
#: one at a time, in process and over HTTP alike).
USERS = 512


def session_body(ns: list[str], n: int) -> dict[str, Any]:
    text = f"Session {n}. My favourite colour is {WORDS[n % len(WORDS)]}. I work as a pilot."
    return {
        "namespace": [*ns, f"u{n % USERS}"],
        "thread_id": f"t-{n % 97}",
        "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "Ok."}],
    }


async def drive(
    name: str,
    url: str,
    key: str,
    clients: int,
    seconds: float,
    request: Callable[[aiohttp.ClientSession, int], Awaitable[int]],
) -> Sample:
    """``clients`` loops, each one request at a time for ``seconds``."""
    sample = Sample(name, seconds)
    connector = aiohttp.TCPConnector(limit=clients, force_close=False)
    headers = {"Authorization": f"Bearer {key}"}
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(url, connector=connector, headers=headers,
                                     timeout=timeout) as session:  # fmt: skip
        deadline = time.perf_counter() + seconds
        counter = iter(range(10**12))

        async def loop() -> None:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    status = await request(session, next(counter))
                except (TimeoutError, aiohttp.ClientError):
                    sample.errors += 1
                    continue
                sample.statuses[status] = sample.statuses.get(status, 0) + 1
                if status < 400:
                    sample.latencies.append(time.perf_counter() - started)
                else:
                    sample.errors += 1

        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(clients)))
        sample.seconds = time.perf_counter() - started
    return sample


def post(path: str, ns: list[str]) -> Callable[[aiohttp.ClientSession, int], Awaitable[int]]:
    async def request(session: aiohttp.ClientSession, n: int) -> int:
        async with session.post(path, json=session_body(ns, n)) as response:
            await response.read()
            return response.status

    return request


def get(
    path: str, params: list[tuple[str, str]]
) -> Callable[[aiohttp.ClientSession, int], Awaitable[int]]:
    async def request(session: aiohttp.ClientSession, n: int) -> int:
        async with session.get(path, params=params) as response:
            await response.read()
            return response.status

    return request


def in_process_publish(producer: Producer, ns: list[str], threads: int, seconds: float) -> Sample:
    sample = Sample("Producer.session_ended (in process)", seconds)
    deadline = time.perf_counter() + seconds
    lock = threading.Lock()

    def loop(k: int) -> None:
        n = k
        while time.perf_counter() < deadline:
            body = session_body(ns, n)
            started = time.perf_counter()
            producer.session_ended(tuple(body["namespace"]), body["thread_id"], body["messages"])
            elapsed = time.perf_counter() - started
            with lock:
                sample.latencies.append(elapsed)
            n += threads

    started = time.perf_counter()
    pool = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    sample.seconds = time.perf_counter() - started
    return sample


async def in_process_recall(reader: AsyncReader, ns: tuple[str, ...], clients: int,
                            seconds: float) -> Sample:  # fmt: skip
    sample = Sample("Reader.recall (in process)", seconds)
    deadline = time.perf_counter() + seconds

    async def loop(k: int) -> None:
        n = k
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            await reader.recall(ns, WORDS[n % len(WORDS)], 10)
            sample.latencies.append(time.perf_counter() - started)
            n += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(k) for k in range(clients)))
    sample.seconds = time.perf_counter() - started
    return sample


@dataclass
class Service:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def stop(self) -> None:
        with deferred_interrupts():
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(60)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()


def start_service(stack: contextlib.ExitStack, env: dict[str, str], tmp: Path) -> Service:
    port = free_port()
    log = tmp / "service.log"
    with deferred_interrupts(), open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "bench._http_app:create",
             "--host", "127.0.0.1", f"--port={port}", "--no-access-log", "--loop", "uvloop",
             "--http", "httptools", "--backlog", "4096", "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        service = Service(proc, f"http://127.0.0.1:{port}", log)
        stack.callback(service.stop)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"the service exited:\n{log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError):
            import urllib.request

            urllib.request.urlopen(f"{service.url}/healthz", timeout=2).close()
            return service
        time.sleep(0.2)
    raise BenchError("the service did not answer in 60 s")


async def admin(dsn: str, body: Callable[[Any], Awaitable[Any]]) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        await as_operator(conn)
        return await body(conn)
    finally:
        await conn.close()


def seed_memories(store_env: dict[str, str], ns: tuple[str, ...], count: int) -> None:
    async def go() -> None:
        store = PgMemory(store_env["TULIP_DATABASE_URL"], table=store_env["TULIP_MEMORY_TABLE"],
                         embedder=HashingEmbedder(384))  # fmt: skip
        try:
            for start in range(0, count, 200):
                for i in range(start, min(count, start + 200)):
                    memory = Memory(
                        type=MemoryType.USER,
                        key=f"fact-{i}",
                        content=f"Fact {i}: the user likes {WORDS[i % len(WORDS)]} and item {i}.",
                    )
                    await store.put((*ns, "user"), memory.key, memory.to_store_value())
        finally:
            await store.close()

    run_async(go())


@dataclass
class Result:
    publish: list[Sample]
    recall: list[Sample]
    soak: Sample
    accepted: int
    applied: int
    drain_seconds: float
    clients: int
    soak_clients: int


def run(stack: contextlib.ExitStack, args: argparse.Namespace) -> Result:
    services: Services = open_services(stack, args.database_url, args.broker_url,
                                       prefix="tulip-bench-http-")  # fmt: skip
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TULIP_")},
        "TULIP_BROKER_URL": services.broker_url,
        "TULIP_REDIS_URL": services.broker_url,
        "TULIP_DATABASE_URL": services.app_dsn,
        "TULIP_MEMORY_TABLE": f"bench_http_{uuid.uuid4().hex[:6]}",
        "TULIP_EXTRACT_SHARDS": str(SHARDS),
        "TULIP_CHECKPOINT_SHARDS": str(SHARDS),
        "TULIP_CHECKPOINT_URL": f"file://{services.tmp / 'checkpoints'}",
        "TULIP_SPOOL_DIR": str(services.tmp / "spool"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": str(ROOT),
    }
    migrate_now(configured_store(services.admin_dsn, env))
    key, _ = run_async(admin(services.admin_dsn, lambda c: keys.mint(c, TENANT, "all", "bench")))
    service = start_service(stack, env, services.tmp)
    url, clients, seconds = service.url, args.clients, args.seconds
    ns = [TENANT, "users"]

    progress(f"publish: {clients} clients x {seconds:.0f} s each (no-op, HTTP, in process) ...")
    publish = [
        asyncio.run(drive("POST /bench/noop (floor)", url, key, clients, seconds,
                          post("/bench/noop", ns))),
        asyncio.run(drive("POST /v1/sessions", url, key, clients, seconds,
                          post("/v1/sessions", ns))),
    ]  # fmt: skip
    settings = ProducerSettings(broker_url=services.broker_url, redis_url=services.broker_url,
                                spool_dir=services.tmp / "spool-inproc", extract_shards=SHARDS,
                                checkpoint_shards=SHARDS)  # fmt: skip
    with Producer(settings) as producer:
        publish.append(in_process_publish(producer, ns, clients, seconds))

    recall_ns = (TENANT, "users", "recall")
    progress(
        f"recall: seeding {args.memories} memories, then {clients} clients x {seconds:.0f} s ..."
    )
    seed_memories(env, recall_ns, args.memories)
    params = [("namespace", p) for p in recall_ns]
    recall = [
        asyncio.run(drive("GET /bench/noop (round trip)", url, key, clients, seconds,
                          get("/bench/noop", params))),
        asyncio.run(drive("GET /v1/memories?q=", url, key, clients, seconds,
                          get("/v1/memories", [*params, ("q", "pilot")]))),
    ]  # fmt: skip

    async def inproc() -> Sample:
        reader = AsyncReader(PgMemory(services.app_dsn, table=env["TULIP_MEMORY_TABLE"],
                                      embedder=HashingEmbedder(384)))  # fmt: skip
        try:
            return await in_process_recall(reader, recall_ns, clients, seconds)
        finally:
            await reader.close()

    recall.append(asyncio.run(inproc()))

    progress("workers: draining the publish phase's backlog ...")
    pool = WorkerPool(services.tmp / "logs", env)
    stack.callback(pool.stop)
    for k in range(SHARDS):
        pool.start("tulip_workers.app", f"extract-{k}", f"memory.extract.{k}", "threads", 16)
    soak_tenant = f"soak-{uuid.uuid4().hex[:6]}"
    soak_key, _ = run_async(
        admin(services.admin_dsn, lambda c: keys.mint(c, soak_tenant, "write", "soak"))
    )
    progress(f"soak: {args.soak_clients} connections x {args.soak_seconds:.0f} s ...")
    soak = asyncio.run(drive(f"soak: POST /v1/sessions, {args.soak_clients} connections", url,
                             soak_key, args.soak_clients, args.soak_seconds,
                             post("/v1/sessions", [soak_tenant, "u"])))  # fmt: skip
    accepted = soak.statuses.get(202, 0)
    progress(f"soak: {accepted} accepted; waiting until every one is applied ...")
    started = time.perf_counter()
    applied = 0
    deadline = time.monotonic() + args.drain_timeout
    count = "SELECT count(*) FROM tulip_event_ledger WHERE tenant = $1 AND status = 'applied'"
    while time.monotonic() < deadline:
        pool.check()
        applied = run_async(admin(services.admin_dsn, lambda c: c.fetchval(count, soak_tenant)))
        if applied >= accepted:
            break
        time.sleep(2)
    return Result(publish, recall, soak, accepted, applied, time.perf_counter() - started,
                  clients, args.soak_clients)  # fmt: skip


def report(result: Result) -> None:
    def line(s: Sample, base: Sample | None) -> str:
        ratio = f"{s.throughput / base.throughput:6.2f}x" if base else "     -"
        return (f"| {s.name:<40} | {s.throughput:9.0f}/s | {ratio} | {s.pct(0.5) * 1000:7.2f} "
                f"| {s.pct(0.99) * 1000:7.2f} | {s.errors:6d} |")  # fmt: skip

    head = "| {:<40} | {:>11} | {:>7} | {:>7} | {:>7} | {:>6} |".format(
        "what", "throughput", "vs floor", "p50 ms", "p99 ms", "errors"
    )
    rule = "|" + "|".join("-" * n for n in (42, 13, 9, 9, 9, 8)) + "|"
    floor, http, inproc = result.publish
    print(f"\n## POST /v1/sessions, {result.clients} concurrent clients\n")
    print(head, rule, line(floor, None), line(http, floor), line(inproc, floor), sep="\n")
    print(f"\nHTTP / floor throughput: {http.throughput / floor.throughput:.2f}x (target >= 0.6); "
          f"HTTP / in-process throughput: {http.throughput / inproc.throughput:.2f}x")  # fmt: skip
    rt, recall, local = result.recall
    print(f"\n## Recall, {result.clients} concurrent clients\n")
    print(head, rule, line(rt, None), line(recall, rt), line(local, rt), sep="\n")
    bound = 1.3 * local.pct(0.5) + rt.pct(0.5)
    print(f"\nHTTP recall p50 {recall.pct(0.5) * 1000:.2f} ms vs 1.3 x in-process p50 + no-op "
          f"round trip p50 = {bound * 1000:.2f} ms: "
          f"{'within' if recall.pct(0.5) <= bound else 'OVER'} the target")  # fmt: skip
    s = result.soak
    print(f"\n## Soak: {result.soak_clients} connections, {s.seconds:.0f} s\n")
    print(f"requests answered {sum(s.statuses.values())}, errors {s.errors}, "
          f"statuses {dict(sorted(s.statuses.items()))}, {s.throughput:.0f}/s, "
          f"p50 {s.pct(0.5) * 1000:.1f} ms, p99 {s.pct(0.99) * 1000:.1f} ms")  # fmt: skip
    print(f"accepted {result.accepted}, applied {result.applied} "
          f"({'all' if result.applied >= result.accepted else 'NOT ALL'}; the workers drained "
          f"the backlog in {result.drain_seconds:.0f} s)")  # fmt: skip
    _ = statistics


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="an administrator DSN (default: embedded)")
    parser.add_argument("--broker-url", help="a Redis URL (default: embedded)")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--soak-clients", type=int, default=1000)
    parser.add_argument("--soak-seconds", type=float, default=60.0)
    parser.add_argument("--drain-timeout", type=float, default=1800.0)
    args = parser.parse_args()
    return bench_main(lambda stack: run(stack, args), report)


if __name__ == "__main__":
    sys.exit(main())

"""One owner per shard: takeover times, the cost of a standby, the cost of the lease checks.

Starts its own Postgres + pgvector and Redis (embedded, in a temp dir) unless given
``--admin-dsn``/``--broker-url``, and a model stub answering at once. Shard 0's workers
run in the layout of ``tulip-memory worker extract --concurrency C`` (C = 4), with a
lease of ``--lease`` seconds (default 10, ``TULIP_SHARD_LEASE_SECONDS``'s default).
Measures, in one run:

1. **Takeover**: an owner and a standby; the owner gets SIGKILL (a dead host) or SIGTERM
   (a graceful handover), one event is published at once, and the time from the signal
   to that event applied (its ledger row) is one sample: what the queue's users wait.
   Then the old owner is started again, as the standby of the next trial. p50/p99 over
   ``--trials`` (default 20) of each;
2. **Throughput** of the one shard worker alone against the same with a standby
   beside it (``--events`` events at once, published before the clock starts; the
   runs alternate, ``--rounds`` each);
3. **Lease checks per event**: on the bench's Redis, a message's broker steps as a
   shard worker makes them, consume (``BLMOVE``), unacked write (script), ack (kombu's
   pipeline), against the fenced ones (consume, unacked write and ack, each a script
   checking the token first), ``--messages`` messages each, interleaved.

Usage: python -m bench.shards [--quick] [--trials 20] [--lease 10] [--events 400]
                              [--rounds 2] [--messages 5000] [--admin-dsn DSN]
                              [--broker-url URL]
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import argparse
import contextlib
import hashlib
import signal
import statistics
import sys
import time
from dataclasses import dataclass

import redis

from bench._services import BenchError, Worker, WorkerPool, bench_main, progress
from bench.pipeline import SESSION, THREAD, Bench, extraction_model, open_bench
from tulip_wire.scripts import lua
from tulip_wire.topology import lease_key
from tulip_workers import fencing, reliable_redis
from tulip_workers.keyed import BUFFER_PER_SLOT

QUEUE = "memory.extract.0"
C = 4
APP = "tulip_workers.app"


@dataclass(frozen=True)
class Options:
    trials: int
    lease: float
    events: int
    rounds: int
    messages: int
    admin_dsn: str | None
    broker_url: str | None

    @classmethod
    def parse(cls, argv: list[str] | None = None) -> Options:
        parser = argparse.ArgumentParser(prog="python -m bench.shards", description=__doc__)
        parser.add_argument("--quick", action="store_true", help="3 trials, a 2 s lease")
        parser.add_argument("--trials", type=int, default=20)
        parser.add_argument("--lease", type=float, default=10.0)
        parser.add_argument("--events", type=int, default=400)
        parser.add_argument("--rounds", type=int, default=2)
        parser.add_argument("--messages", type=int, default=5000)
        parser.add_argument("--admin-dsn")
        parser.add_argument("--broker-url")
        a = parser.parse_args(argv)
        if a.quick:
            a.trials, a.lease, a.events, a.rounds, a.messages = 3, 2.0, 150, 1, 2000
        if a.trials < 1 or a.lease <= 0 or a.events < 10 or a.rounds < 1 or a.messages < 100:
            parser.error("--trials >= 1, --lease > 0, --events >= 10, --rounds >= 1, "
                         "--messages >= 100")  # fmt: skip
        return cls(a.trials, a.lease, a.events, a.rounds, a.messages, a.admin_dsn, a.broker_url)


@dataclass(frozen=True)
class Report:
    options: Options
    takeover: dict[str, list[float]]
    leased: dict[str, list[float]]
    alone: list[float]
    with_standby: list[float]
    plain_us: float
    fenced_us: float
    load: tuple[float, float, float]


def run(stack: contextlib.ExitStack, options: Options) -> Report:
    bench = open_bench(
        stack, options.admin_dsn, options.broker_url, 1, prefix="tulip-bench-shards-"
    )
    bench.model.default_chat = extraction_model(0.0)
    env = {**bench.worker_env(), "TULIP_SHARD_LEASE_SECONDS": str(options.lease)}
    env["TULIP_EXTRACT_CONCURRENCY"] = str(C)
    takeover: dict[str, list[float]] = {"SIGKILL": [], "SIGTERM": []}
    leased: dict[str, list[float]] = {"SIGKILL": [], "SIGTERM": []}
    with WorkerPool(bench.services.tmp / "logs", env) as pool:
        workers = [start(pool, "a")]
        wait_log(workers[0], "owner of", pool)
        workers.append(start(pool, "b"))
        wait_log(workers[1], "standby for", pool)
        backlog_rate(bench, workers[0], 20, "warm")
        for n in range(options.trials):
            for sig in (signal.SIGKILL, signal.SIGTERM):
                owner = owner_of(bench, workers)
                standby = next(w for w in workers if w is not owner)
                lease_s, seconds = trial(bench, pool, owner, sig, f"{n}{sig.name}", options.lease)
                takeover[sig.name].append(seconds)
                leased[sig.name].append(lease_s)
                progress(f"  trial {n + 1} {sig.name}: lease in {lease_s:.2f}s, "
                         f"next event applied in {seconds:.2f}s")  # fmt: skip
                workers = [standby, start(pool, f"{owner.name.split('-')[0]}-{n}{sig.name}")]
                wait_log(workers[1], "standby for", pool)
        alone, with_standby = throughput(bench, pool, workers, options)
    plain, fenced = lease_checks(bench.redis, options.messages)
    return Report(options, takeover, leased, alone, with_standby, plain, fenced, os.getloadavg())


def start(pool: WorkerPool, name: str) -> Worker:
    return pool.start(APP, name, QUEUE, "threads", C * BUFFER_PER_SLOT)


def wait_log(worker: Worker, text: str, pool: WorkerPool, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while text not in (worker.log.read_text(errors="replace") if worker.log.exists() else ""):
        if time.monotonic() > deadline:
            raise BenchError(f"{worker.name} never logged {text!r}:\n{worker.tail()}")
        if worker.proc.poll() is not None:
            raise BenchError(f"{worker.name} exited:\n{worker.tail()}")
        time.sleep(0.02)


def owner_of(bench: Bench, workers: list[Worker]) -> Worker:
    holder = bench.redis.hget(lease_key(QUEUE), "owner")
    text = holder.decode() if isinstance(holder, bytes) else str(holder or "")
    pid = int(text.rsplit("/", 1)[1]) if "/" in text else -1
    for w in workers:
        if w.pid == pid:
            return w
    raise BenchError(f"no worker of {[w.pid for w in workers]} owns {QUEUE} ({holder!r})")


def trial(
    bench: Bench, pool: WorkerPool, owner: Worker, sig: signal.Signals, tag: str, lease: float
) -> tuple[float, float]:
    """Signal the owner, publish one event at once: seconds until another holds the
    lease, and until the event is applied."""
    before = bench.redis.hget(lease_key(QUEUE), "token")
    signalled = time.perf_counter()
    owner.signal(sig)
    with bench.producer(1) as producer:
        ids = [producer.session_ended(("bench", "shards", tag), THREAD, SESSION)]
    bench.event_ids += ids
    while bench.redis.hget(lease_key(QUEUE), "token") in (before, None):
        if time.perf_counter() - signalled > 60 + 3 * lease:
            raise BenchError(f"no takeover of {QUEUE} in {60 + 3 * lease:.0f}s")
        time.sleep(0.005)
    taken = time.perf_counter()
    done = bench.ledger.wait_applied(ids, 60 + 3 * lease, lambda: None)
    owner.proc.wait(60)
    pool.workers.remove(owner)
    return taken - signalled, done - signalled


def throughput(
    bench: Bench, pool: WorkerPool, workers: list[Worker], options: Options
) -> tuple[list[float], list[float]]:
    """Events/s of the owner with its standby beside it, and alone (the standby stopped),
    alternating; the clock starts with the first publish (publishing is a small part)."""
    with_standby: list[float] = []
    alone: list[float] = []
    for r in range(options.rounds):
        for has_standby in (True, False):
            owner = owner_of(bench, workers)
            standby = next((w for w in workers if w is not owner), None)
            if not has_standby and standby is not None:
                standby.signal(signal.SIGTERM)
                standby.proc.wait(60)
                pool.workers.remove(standby)
                workers = [owner]
            if has_standby and standby is None:
                workers = [owner, start(pool, f"s{r}")]
                wait_log(workers[1], "standby for", pool)
            rate = backlog_rate(bench, owner, options.events, f"r{r}{has_standby}")
            (with_standby if has_standby else alone).append(rate)
            progress(f"  round {r + 1}, standby {has_standby}: {rate:.1f} events/s")
    return alone, with_standby


def backlog_rate(bench: Bench, owner: Worker, events: int, tag: str) -> float:
    ids: list[str] = []
    started = time.perf_counter()
    with bench.producer(1) as producer:
        for i in range(events):
            ids.append(producer.session_ended(("bench", "tp", f"{tag}-{i % 16}"), THREAD, SESSION))
    bench.event_ids += ids
    done = bench.ledger.wait_applied(ids, 600, lambda: None)
    return events / (done - started)


def lease_checks(client: redis.Redis, messages: int) -> tuple[float, float]:
    """Microseconds per message of the broker steps, plain and fenced, interleaved."""
    queue, delivering = "bench:shards:q", "bench:shards:delivering"
    hash_key, index_key, lease = "bench:shards:unacked", "bench:shards:index", "bench:shards:lease"
    client.delete(queue, delivering, hash_key, index_key)
    client.hset(lease, mapping={"token": "7", "owner": "bench"})
    record = client.register_script(lua(reliable_redis.__file__, "unacked_from_delivering.lua"))
    consume = client.register_script(fencing.guarded(lua(reliable_redis.__file__, "consume.lua")))
    record_f = client.register_script(fencing.guarded(reliable_redis._RECORD))
    ack_f = client.register_script(fencing.guarded(lua(reliable_redis.__file__, "ack.lua")))
    body = b'{"body": "' + b"x" * 1500 + b'", "properties": {"delivery_tag": "%d"}}'
    plain_t = fenced_t = 0.0
    tail = ',"memory","memory.extract.0"]'
    for batch in range(messages // 100):
        for fenced in (False, True):
            items = [body % (batch * 1000 + i) for i in range(100)]
            client.lpush(queue, *items)
            started = time.perf_counter()
            for i in range(100):
                tag = f"t{batch}-{i}-{fenced}"
                if fenced:
                    item = consume(keys=[queue, delivering, lease], args=["7"])
                else:
                    item = client.blmove(queue, delivering, 1, "RIGHT", "LEFT")
                digest = hashlib.sha1(item, usedforsecurity=False).hexdigest()
                args: list[str | float] = [tag, time.time(), digest, tail]
                if fenced:
                    record_f(keys=[delivering, hash_key, index_key, lease], args=[*args, "7"])
                    ack_f(keys=[hash_key, index_key, lease], args=[tag, "7"])
                else:
                    record(keys=[delivering, hash_key, index_key], args=args)
                    pipe = client.pipeline()
                    pipe.zrem(index_key, tag)
                    pipe.hdel(hash_key, tag)
                    pipe.execute()
            took = time.perf_counter() - started
            if fenced:
                fenced_t += took
            else:
                plain_t += took
    client.delete(queue, delivering, hash_key, index_key, lease)
    n = (messages // 100) * 100
    return plain_t / n * 1e6, fenced_t / n * 1e6


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def report(r: Report) -> None:
    o = r.options
    print(f"# bench.shards: lease {o.lease:g}s, C = {C}, {o.trials} trials, "
          f"load average {r.load[0]:.1f} {r.load[1]:.1f} {r.load[2]:.1f}")  # fmt: skip
    print("\n## takeover after the signal (s): the standby holds the lease; the next event")
    print("## (published at the signal) is applied\n")
    print("| signal | trials | lease p50 | lease p99 | event p50 | event p99 | bound (lease) |")
    print("|---|---|---|---|---|---|---|")
    bounds = {"SIGKILL": f"{o.lease + min(1.0, o.lease / 10):.1f}", "SIGTERM": "1-2"}
    for name, values in r.takeover.items():
        held = r.leased[name]
        print(f"| {name} | {len(values)} | {percentile(held, 0.5):.2f} | "
              f"{percentile(held, 0.99):.2f} | {percentile(values, 0.5):.2f} | "
              f"{percentile(values, 0.99):.2f} | {bounds[name]} |")  # fmt: skip
    alone, standby = statistics.median(r.alone), statistics.median(r.with_standby)
    print("\n## throughput of one shard worker (events/s, median of rounds)\n")
    print("| layout | events/s | ratio |")
    print("|---|---|---|")
    print(f"| owner alone | {alone:.1f} | 1.00 |")
    print(f"| owner + standby | {standby:.1f} | {standby / alone:.2f} |")
    print("\n## broker steps per message (consume, unacked write, ack), µs\n")
    print("| steps | µs/message | ratio |")
    print("|---|---|---|")
    print(f"| plain (BLMOVE, script, pipeline) | {r.plain_us:.0f} | 1.00 |")
    print(f"| fenced (three scripts checking the token) | {r.fenced_us:.0f} | "
          f"{r.fenced_us / r.plain_us:.2f} |")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    options = Options.parse(argv)
    return bench_main(lambda stack: run(stack, options), report)


if __name__ == "__main__":
    sys.exit(main())

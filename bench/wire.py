"""Bytes on the wire and latency of ``Producer.checkpoint_saved``, deltas against whole states.

Each thread is saved turn by turn through a real :class:`~tulip_producer.Producer` on
an embedded Redis (broker and pending lists), and every message is taken off its queue
right after by a kombu consumer with late acks on the shard workers' own transport
(:mod:`tulip_workers.reliable_redis`), as a worker takes it, so Redis receives every
copy: the pending entry, the broker message and the broker's unacked copy.
Bytes are ``INFO stats`` ``total_net_input_bytes`` around each save and its
consumption, with the worker's trim of the pending list (the INFO calls' own bytes
subtracted), against the JSON size of what changed (the
:mod:`tulip_memory.delta.diff` patch from the previous turn; the whole state for the
first save). The same turns go once with the producer's base cache (deltas) and once
with it off (``PublishedBases(0, 0)``: every save whole, the behaviour before deltas).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kombu import Connection

from tulip_memory.delta.diff import diff
from tulip_memory.state import AgentState
from tulip_producer import Producer, ProducerSettings
from tulip_producer.bases import PublishedBases
from tulip_wire import celeryconfig
from tulip_wire.endpoints import kombu_url, redis_client
from tulip_wire.pending import PendingStates
from tulip_workers import reliable_redis

ENVELOPE = 1024  # the fixed allowance per save of the target: <= 3x change + 1 KiB


@dataclass
class WireRun:
    name: str
    mode: str
    saves: int
    wire: list[int]
    change: list[int]
    ms: list[float]

    @property
    def over(self) -> int:
        return sum(w > 3 * c + ENVELOPE for w, c in zip(self.wire, self.change, strict=True))


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def changes(states: Sequence[AgentState]) -> list[int]:
    out: list[int] = []
    previous: dict[str, Any] | None = None
    for state in states:
        data = state.to_checkpoint()
        change = data if previous is None else diff(previous, data)
        out.append(len(json.dumps(change, ensure_ascii=False).encode()))
        previous = data
    return out


def run_thread(
    url: str, spool: Path, name: str, states: Sequence[AgentState], deltas: bool
) -> WireRun:
    settings = ProducerSettings(
        broker_url=url,
        redis_url=url,
        spool_dir=spool,
        checkpoint_shards=1,
        extract_shards=1,
        publish_timeout=30.0,  # measured, not spooled, on a loaded machine
    )
    pending = PendingStates(redis_client(url))
    bases = PublishedBases() if deltas else PublishedBases(0, 0)
    info = redis_client(url)

    def stat() -> int:
        return int(info.info("stats")["total_net_input_bytes"])

    first = stat()
    cost = stat() - first  # what one INFO call itself sends
    wire: list[int] = []
    ms: list[float] = []
    thread = f"{name}-{uuid.uuid4().hex[:6]}"
    options = celeryconfig.broker_transport_options  # one priority step: BLMOVE
    consumer = Connection(kombu_url(url), transport_options=options)
    with Producer(settings, bases=bases) as producer, consumer as conn:
        queue = conn.SimpleQueue("memory.checkpoint.0")
        producer.checkpoint_saved(thread, states[0], tenant="bench")  # connections warm
        queue.get(timeout=60).ack()
        producer.bases.drop(f"bench\x1f{thread}")
        thread = f"{name}-{uuid.uuid4().hex[:6]}"
        for state in states:
            before = stat()
            t0 = time.perf_counter()
            cid = producer.checkpoint_saved(thread, state, tenant="bench")
            ms.append((time.perf_counter() - t0) * 1000)
            message = queue.get(timeout=60)  # BRPOP + the unacked copy, as a worker
            message.ack()
            pending.clear_if("bench", thread, cid)  # and the worker's trim once written
            wire.append(stat() - before - cost)
        queue.close()
    info.close()
    return WireRun(name, "deltas" if deltas else "whole", len(states), wire, changes(states), ms)


def wire_runs(threads: Sequence[Any]) -> list[WireRun]:
    from tulip_ops.dev.embedded import EmbeddedRedis

    reliable_redis.install()  # consume as a shard worker does
    runs: list[WireRun] = []
    with tempfile.TemporaryDirectory(prefix="tulip-bench-wire-") as d:
        server = EmbeddedRedis(Path(d) / "redis")
        url = server.start().url
        try:
            for t in threads:
                for deltas in (True, False):
                    runs.append(run_thread(url, Path(d) / "spool", t.name, t.states, deltas))
        finally:
            server.stop()
    return runs


def wire_table(runs: list[WireRun]) -> None:
    head = (
        f"{'thread':<16}{'mode':>7}{'saves':>6} | {'wire/save':>10}{'change':>8}{'wire/chg':>9}"
        f"{'over':>5} | {'MiB wire':>9}{'MiB chg':>8} | {'p50 ms':>7}{'p99 ms':>7}{'max':>7}"
    )
    print(
        "\ncheckpoint_saved on the wire (Redis INFO total_net_input_bytes: pending entry,"
        " broker message, unacked copy); over = saves above 3x change + 1 KiB\n"
        f"{head}\n{'-' * len(head)}"
    )
    for mode in ("deltas", "whole"):
        rows = [r for r in runs if r.mode == mode]
        everything = WireRun(
            "ALL", mode, sum(r.saves for r in rows), [w for r in rows for w in r.wire],
            [c for r in rows for c in r.change], [m for r in rows for m in r.ms],
        )  # fmt: skip
        long = [m for r in rows if r.saves >= 600 for m in r.ms]
        for r in [*rows, everything]:
            w, c = sum(r.wire), sum(r.change)
            print(
                f"{r.name[-16:]:<16}{r.mode:>7}{r.saves:>6} | {w / r.saves:>10,.0f}"
                f"{c / r.saves:>8,.0f}{w / c:>8.2f}x{r.over:>5} | {w / 2**20:>9.2f}"
                f"{c / 2**20:>8.2f} | {statistics.median(r.ms):>7.2f}{pct(r.ms, 0.99):>7.2f}"
                f"{max(r.ms):>7.2f}"
            )
        if long:
            print(
                f"{'>=600 turns':<16}{mode:>7}{len(long):>6} | p50 "
                f"{statistics.median(long):.2f} ms, p99 {pct(long, 0.99):.2f} ms"
                " (checkpoint_saved, threads of 600+ turns)"
            )

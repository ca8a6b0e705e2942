"""The ``dev --demo`` workload, through the whole pipeline.

Synthetic users of several tenants finish a first session stating facts and a later
one correcting some of them. Every session is published with the producer; the
shard workers extract and store the memories; the demo then asks for every fact
through ``Reader.recall`` and checks that the newest value comes back first, that
tenants cannot see each other at the database, and reports what it measured.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from tulip_memory.config import store_from_env
from tulip_memory.env import DATABASE_URL
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_ops.dev.embedded import run_async
from tulip_producer import Producer, ProducerSettings
from tulip_producer.reader import Reader

FACTS: dict[str, tuple[str, list[str]]] = {
    "favourite-colour": ("favourite colour", ["green", "blue", "amber", "violet", "teal"]),
    "home-city": ("home city", ["Lisbon", "Osaka", "Quito", "Tromso", "Dakar"]),
    "job-title": ("job title", ["nurse", "welder", "pilot", "baker", "actuary"]),
    "pet-name": ("pet name", ["Rex", "Miso", "Pip", "Olive", "Bruno"]),
    "morning-drink": ("morning drink", ["tea", "espresso", "matcha", "cocoa", "kefir"]),
}
#: The tenant whose support threads the demo checkpoints (thread state is per tenant).
THREAD_TENANT = "demo-support"
CORRECTED = ("favourite-colour", "home-city")
Namespace = tuple[str, ...]


@dataclass
class DemoReport:
    events: int = 0
    publish_seconds: float = 0.0
    pipeline_seconds: float = 0.0
    checks: int = 0
    recalled: int = 0
    dead: int = 0
    failures: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    isolation_ok: bool = False
    threads: int = 0
    checkpoints: int = 0
    threads_loaded: int = 0
    stored_bytes: int = 0
    full_state_bytes: int = 0

    @property
    def ok(self) -> bool:
        return (
            self.isolation_ok and not self.failures and not self.dead
            and self.recalled == self.checks and self.threads_loaded == self.threads
        )  # fmt: skip

    @property
    def saving(self) -> float:
        return self.full_state_bytes / max(self.stored_bytes, 1)

    def lines(self) -> list[str]:
        lat = np.array(self.latencies_ms or [0.0])
        rate = self.events / max(self.pipeline_seconds, 1e-9)
        return [
            f"events            {self.events} published in {self.publish_seconds:.2f}s, "
            f"all applied after {self.pipeline_seconds:.1f}s ({rate:,.0f} events/s)",
            f"dead letters      {self.dead}",
            f"facts recalled    {self.recalled}/{self.checks} (corrections must win)",
            f"recall latency    p50 {np.percentile(lat, 50):.2f} ms, "
            f"p99 {np.percentile(lat, 99):.2f} ms (Reader.recall, one statement)",
            f"tenant isolation  {'holds' if self.isolation_ok else 'BROKEN'}",
            f"checkpoints       {self.checkpoints} over {self.threads} threads; "
            f"{self.threads_loaded}/{self.threads} load back exactly (latest and earlier ones)",
            f"bytes stored      {self.stored_bytes:,} vs {self.full_state_bytes:,} for the "
            f"full state every save ({self.saving:.0f}x less)",
            *[f"FAILED  {f}" for f in self.failures[:10]],
            "OK" if self.ok else "FAILED",
        ]


def sessions(rng: random.Random) -> tuple[dict[str, str], dict[str, str]]:
    """A user's first session (every fact) and later one (corrections)."""
    first = {k: rng.choice(values) for k, (_, values) in FACTS.items()}
    second = {k: rng.choice([v for v in FACTS[k][1] if v != first[k]]) for k in CORRECTED}
    return first, second


def say(facts: Mapping[str, str], correcting: bool) -> list[Message]:
    opener = "Actually, my" if correcting else "My"
    text = " ".join(f"{opener} {FACTS[k][0]} is {v}." for k, v in facts.items())
    return [
        Message(role=Role.USER, content=text),
        Message(role=Role.ASSISTANT, content="Noted, thank you."),
    ]


def run_pipeline_demo(
    settings: Mapping[str, str],
    *,
    run_id: str,
    tenants: int = 4,
    users: int = 25,
    seed: int = 7,
    progress: Callable[[str], None] = print,
    timeout: float = 300.0,
    threads: int = 10,
    turns: int = 40,
) -> DemoReport:
    rng = random.Random(seed)
    report = DemoReport()
    truth: dict[Namespace, dict[str, str]] = {}
    plan: list[tuple[Namespace, dict[str, str], bool]] = []
    for t in range(tenants):
        for u in range(users):
            ns = (f"{run_id}-tenant{t}", "users", f"u{u}")
            first, second = sessions(rng)
            truth[ns] = {**first, **second}
            plan.append((ns, first, False))
            plan.append((ns, second, True))
    # Round one of every user before any correction, interleaved across tenants.
    plan.sort(key=lambda p: p[2])
    started = time.perf_counter()
    ids = _publish(settings, plan, report)
    saved = _checkpoint_threads(settings, run_id, rng, report, threads, turns)
    with Reader.from_env(settings) as reader:
        _wait(reader, ids, report, progress, timeout, started)
        _recall(reader, truth, report)
        report.isolation_ok = run_async(_isolation_holds(settings, run_id))
        _wait_durable(reader, list(saved), progress, timeout, report)
        run_async(_check_threads(reader, saved, report))
    return report


def _producer_settings(settings: Mapping[str, str]) -> ProducerSettings:
    """The stack's producer, as an application sourcing its env file builds it (claim
    checks included: under the checkpoint store, where the workers look)."""
    return ProducerSettings.from_env(settings)


def _checkpoint_threads(
    settings: Mapping[str, str],
    run_id: str,
    rng: random.Random,
    report: DemoReport,
    threads: int,
    turns: int,
) -> dict[str, list[tuple[str, AgentState]]]:
    """Long support threads, one checkpoint per turn, published like a chat backend."""
    saved: dict[str, list[tuple[str, AgentState]]] = {}
    with Producer(_producer_settings(settings)) as producer:
        for t in range(threads):
            thread, messages = f"{run_id}/ticket-{t}", []
            for turn in range(turns):
                topic = rng.choice(["refund", "delivery", "invoice", "password", "upgrade"])
                messages += [
                    Message(role=Role.USER, content=f"Turn {turn}: a question about my {topic}."),
                    Message(
                        role=Role.ASSISTANT, content=f"Here is what I found about the {topic}."
                    ),
                ]
                state = AgentState(messages=tuple(messages), iterations=turn + 1)
                cid = producer.checkpoint_saved(thread, state, tenant=THREAD_TENANT)
                saved.setdefault(thread, []).append((cid, state))
                report.full_state_bytes += len(json.dumps(state.to_checkpoint()))
        producer.flush(timeout=60)
    report.threads = threads
    report.checkpoints = threads * turns
    return saved


def _wait_durable(
    reader: Reader,
    threads: list[str],
    progress: Callable[[str], None],
    timeout: float,
    report: DemoReport,
) -> None:
    """A thread's newest state is durable once its pending overlay is gone."""
    pending = reader.aio.pending
    deadline = time.monotonic() + timeout
    waiting = list(threads)
    while waiting and pending is not None and time.monotonic() < deadline:
        waiting = [t for t in waiting if pending.exists(THREAD_TENANT, t)]
        progress(f"  threads durable {len(threads) - len(waiting)}/{len(threads)}")
        if waiting:
            time.sleep(0.5)
    if waiting:
        report.failures.append(f"{len(waiting)} threads not durable after {timeout:.0f}s")


async def _check_threads(
    reader: Reader, saved: dict[str, list[tuple[str, AgentState]]], report: DemoReport
) -> None:
    store = reader.aio.threads(THREAD_TENANT)
    for thread, history in saved.items():
        latest_ok = await store.load(thread) == history[-1][1]
        picks = history[:: max(1, len(history) // 4)]
        earlier_ok = all([await store.load(thread, cid) == st for cid, st in picks])
        if latest_ok and earlier_ok:
            report.threads_loaded += 1
        else:
            report.failures.append(f"thread {thread} did not load back exactly")
        stats = await store.get_storage_stats(thread)
        report.stored_bytes += int(stats["stored_bytes"])


def _publish(
    settings: Mapping[str, str],
    plan: list[tuple[Namespace, dict[str, str], bool]],
    report: DemoReport,
) -> list[tuple[str, str]]:
    """Publish the plan; ``(tenant, event id)`` of each event (status is per tenant)."""
    started = time.perf_counter()
    with Producer(_producer_settings(settings)) as producer:
        ids = [(ns[0], producer.session_ended(ns, f"{ns[2]}-chat", say(f, c))) for ns, f, c in plan]
        producer.flush(timeout=60)
    report.events = len(ids)
    report.publish_seconds = time.perf_counter() - started
    return ids


def _wait(
    reader: Reader,
    ids: list[tuple[str, str]],
    report: DemoReport,
    progress: Callable[[str], None],
    timeout: float,
    started: float,
) -> None:
    pending, deadline, last = list(ids), time.monotonic() + timeout, 0.0
    while pending and time.monotonic() < deadline:
        statuses = [(t, reader.status(e, tenant=t)) for t, e in pending]
        report.dead += sum(s.state == "dead" for _, s in statuses)
        pending = [(t, s.event_id) for t, s in statuses if s.state == "pending"]
        if time.monotonic() - last >= 1.0 or not pending:
            last = time.monotonic()
            done = len(ids) - len(pending)
            progress(f"  applied {done}/{len(ids)} events ({time.perf_counter() - started:.1f}s)")
        if pending:
            time.sleep(0.2)
    report.pipeline_seconds = time.perf_counter() - started
    if pending:
        report.failures.append(f"{len(pending)} events still pending after {timeout:.0f}s")


def _recall(reader: Reader, truth: dict[Namespace, dict[str, str]], report: DemoReport) -> None:
    for ns, facts in truth.items():
        for key, answer in facts.items():
            report.checks += 1
            started = time.perf_counter()
            found = reader.recall(ns, FACTS[key][0], limit=3)
            report.latencies_ms.append((time.perf_counter() - started) * 1000)
            top = found[0] if found else None
            if top is not None and top.key == key and top.content.rstrip(".").endswith(answer):
                report.recalled += 1
            else:
                got = None if top is None else f"{top.key}: {top.content}"
                report.failures.append(f"{'/'.join(ns)} {key}: want {answer!r}, got {got!r}")


async def _isolation_holds(settings: Mapping[str, str], run_id: str) -> bool:
    """Raw SQL through the application role sees nothing without a tenant pinned and
    nothing of tenant 0 as tenant 1; a call spanning tenants is refused."""
    import asyncpg

    store = store_from_env(settings)
    t0, t1 = f"{run_id}-tenant0", f"{run_id}-tenant1"
    try:
        await store.search_many([(t0, "users"), (t1, "users")], "favourite colour")
        return False
    except ValueError:
        pass
    finally:
        await store.close()
    conn = await asyncpg.connect(DATABASE_URL.read(settings))
    try:
        unpinned = await conn.fetchval(f"SELECT count(*) FROM {store.table}")
        async with conn.transaction():
            await conn.execute("SELECT set_config('tulip.tenant', $1, true)", t1)
            leaked = await conn.fetchval(
                f"SELECT count(*) FROM {store.table} WHERE tenant = $1", t0
            )
            own = await conn.fetchval(f"SELECT count(*) FROM {store.table} WHERE tenant = $1", t1)
    finally:
        await conn.close()
    return bool(unpinned == 0 and leaked == 0 and own > 0)

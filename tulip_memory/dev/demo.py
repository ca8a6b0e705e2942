"""The ``dev --demo`` workload: plant facts, correct some, recall them all.

Synthetic users of several tenants tell the store facts in a first session and
correct some of them in a second; the demo then asks for every fact through
``search_many`` and checks that the newest value comes back first, that tenants
cannot see each other, and reports throughput and recall latency.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tulip_memory.store import PgMemory

FACTS: dict[str, tuple[str, list[str]]] = {
    "colour": ("favourite colour", ["green", "blue", "amber", "violet", "teal"]),
    "city": ("home city", ["Lisbon", "Osaka", "Quito", "Tromso", "Dakar"]),
    "job": ("job title", ["nurse", "welder", "pilot", "baker", "actuary"]),
    "pet": ("pet name", ["Rex", "Miso", "Pip", "Olive", "Bruno"]),
    "drink": ("morning drink", ["tea", "espresso", "matcha", "cocoa", "kefir"]),
}
CORRECTED = ("colour", "city")


@dataclass
class DemoReport:
    writes: int = 0
    write_seconds: float = 0.0
    checks: int = 0
    recalled: int = 0
    failures: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    isolation_ok: bool = False

    @property
    def ok(self) -> bool:
        return self.isolation_ok and not self.failures and self.recalled == self.checks

    def lines(self) -> list[str]:
        lat = np.array(self.latencies_ms or [0.0])
        return [
            f"writes            {self.writes} in {self.write_seconds:.2f}s "
            f"({self.writes / max(self.write_seconds, 1e-9):,.0f}/s)",
            f"facts recalled    {self.recalled}/{self.checks} (corrections must win)",
            f"recall latency    p50 {np.percentile(lat, 50):.2f} ms, "
            f"p99 {np.percentile(lat, 99):.2f} ms (search_many over 2 namespaces)",
            f"tenant isolation  {'holds' if self.isolation_ok else 'BROKEN'}",
            *[f"FAILED  {f}" for f in self.failures[:10]],
            "OK" if self.ok else "FAILED",
        ]


def _sessions(rng: random.Random) -> tuple[dict[str, str], dict[str, str]]:
    first = {k: rng.choice(values) for k, (_, values) in FACTS.items()}
    second = {k: rng.choice([v for v in FACTS[k][1] if v != first[k]]) for k in CORRECTED}
    return first, second


def _value(fact: str, answer: str) -> dict[str, Any]:
    label = FACTS[fact][0]
    return {"type": "user", "key": fact, "content": f"{label}: {answer}"}


async def run_store_demo(
    app_dsn: str, *, run_id: str, tenants: int = 4, users: int = 25, seed: int = 7
) -> DemoReport:
    """Run the workload against ``PgMemory`` at ``app_dsn``."""
    rng = random.Random(seed)
    report = DemoReport()
    store = PgMemory(app_dsn)
    try:
        truth = await _plant(store, rng, run_id, tenants, users, report)
        await _recall(store, truth, report)
        report.isolation_ok = await _isolation_holds(store, app_dsn, run_id)
    finally:
        await store.close()
    return report


async def _plant(
    store: PgMemory, rng: random.Random, run_id: str, tenants: int, users: int, report: DemoReport
) -> dict[tuple[str, ...], dict[str, str]]:
    truth: dict[tuple[str, ...], dict[str, str]] = {}
    started = time.perf_counter()
    for t in range(tenants):
        for u in range(users):
            ns = (f"{run_id}-tenant{t}", "users", f"u{u}", "user")
            first, second = _sessions(rng)
            for session in (first, second):
                await store.put_batch([(ns, k, _value(k, v), None) for k, v in session.items()])
                report.writes += len(session)
            truth[ns] = {**first, **second}
            await store.put((*ns[:3], "feedback"), "tone", {"content": "prefers short answers"})
            report.writes += 1
    report.write_seconds = time.perf_counter() - started
    return truth


async def _recall(
    store: PgMemory, truth: dict[tuple[str, ...], dict[str, str]], report: DemoReport
) -> None:
    for ns, facts in truth.items():
        for fact, answer in facts.items():
            report.checks += 1
            started = time.perf_counter()
            found = await store.search_many([ns, (*ns[:3], "feedback")], FACTS[fact][0], limit=3)
            report.latencies_ms.append((time.perf_counter() - started) * 1000)
            top = found[0][0] if found[0] else None
            if top is not None and top.key == fact and top.value["content"].endswith(answer):
                report.recalled += 1
            else:
                got = None if top is None else top.value.get("content")
                report.failures.append(f"{'/'.join(ns)} {fact}: want {answer!r}, got {got!r}")


async def _isolation_holds(store: PgMemory, app_dsn: str, run_id: str) -> bool:
    """A call spanning tenants is refused, and raw SQL through the application role
    sees nothing without a tenant pinned and nothing of tenant 0 as tenant 1."""
    import asyncpg

    t0, t1 = f"{run_id}-tenant0", f"{run_id}-tenant1"
    try:
        await store.search_many([(t0, "users"), (t1, "users")], "favourite colour")
        return False
    except ValueError:
        pass
    conn = await asyncpg.connect(app_dsn)
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

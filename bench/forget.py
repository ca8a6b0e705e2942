"""Erase benchmark: time to applied, and other tenants' recall p99 during an erase.

Two erases, as the issue sizes them: a namespace with 100,000 memories and 200,000
turns (``forget``), and a tenant with 1,000 threads of 600 turns, each thread a
checkpoint of its 600 turns' messages (``forget_tenant``). Other tenants' recall runs
in a process of its own at ``--rate`` queries a second throughout; its p50/p99 while
idle (``--idle`` seconds before each erase) are set against those during the erase.
The target: p99 during at most 2x idle. The erase runs the workers' own code
(:class:`tulip_workers.erasing.Eraser`: tombstone, paced batches, ledger row) in this
process, with ``--batch`` and ``--pace`` (``TULIP_ERASE_BATCH``, ``TULIP_ERASE_PACE``);
the broker's hop to a worker (milliseconds) is not in the time.

The erased rows are written with SQL (``INSERT ... SELECT``, their vectors NULL: an
HNSW index drops a deleted row's entry at vacuum, not at the delete, so vectors do not
change what an erase costs); the other tenants' rows through ``put_batch``, with
vectors, which their recall reads.

    python -m bench.forget [--quick] [--rate 40] [--idle 5] [--batch 2000] [--pace 1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from bench._services import bench_main, open_services
from bench.reindex import Latency, RecallProbe, dataset, old_store, seed, tenant_names
from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.tenants import tenant_checkpointer
from tulip_memory.messages import Message, Role
from tulip_memory.registry import get_checkpointer
from tulip_memory.state import AgentState
from tulip_ops.dev.embedded import run_async
from tulip_wire.events import memory_forget
from tulip_workers.erasing import Eraser, Subject

FULL = {"memories": 100_000, "turns": 200_000, "threads": 1_000, "thread_turns": 600}
QUICK = {"memories": 5_000, "turns": 10_000, "threads": 40, "thread_turns": 600}
OTHERS, OTHER_ROWS = 8, 16_000
CHUNK = 20_000


@dataclass(frozen=True)
class Result:
    label: str
    rows: int
    seconds: float
    counts: dict[str, int]
    idle: Latency
    during: Latency


async def _insert(admin: str, table: str, tenant: str, ns: str, memories: int, turns: int) -> None:
    """``memories`` memories and ``turns`` turns of one namespace, by SQL."""
    conn = await asyncpg.connect(admin)
    try:
        for lo in range(0, memories, CHUNK):
            await conn.execute(
                f"""INSERT INTO {table} (tenant, ns, key, value, content, metadata)
                SELECT $1, $2 || chr(31) || 'user', 'k' || g,
                       jsonb_build_object('content', 'fact ' || g),
                       'the user said fact ' || g || ' about topic ' || (g % 97),
                       jsonb_build_object('source_ids', jsonb_build_array('m' || g))
                FROM generate_series($3::int, $4::int) AS g""",
                tenant, ns, lo, min(memories, lo + CHUNK) - 1,
            )  # fmt: skip
        for lo in range(0, turns, CHUNK):
            await conn.execute(
                f"""INSERT INTO {table}_turns (tenant, ns, thread_id, event_id, position,
                    text, turn, metadata)
                SELECT $1, $2, 'th' || (g / 600), 'e' || (g / 20), g % 20,
                       'user: message ' || g || ' about topic ' || (g % 89),
                       jsonb_build_object('user', 'message ' || g),
                       jsonb_build_object('message_ids', jsonb_build_array('m' || g))
                FROM generate_series($3::int, $4::int) AS g""",
                tenant, ns, lo, min(turns, lo + CHUNK) - 1,
            )  # fmt: skip
    finally:
        await conn.close()


async def _threads(base: DeltaCheckpointer, tenant: str, threads: int, turns: int) -> None:
    """``threads`` checkpointed threads of ``turns`` turns (two messages each)."""
    mine = tenant_checkpointer(base, tenant)
    for i in range(threads):
        messages = tuple(
            Message(role=Role.USER if k % 2 == 0 else Role.ASSISTANT, content=f"t{i} m{k} text")
            for k in range(2 * turns)
        )
        await mine.save(AgentState(messages=messages), f"thread-{i}")


async def _erase(
    app_dsn: str, table: str, checkpoints: DeltaCheckpointer | None, subject: Subject,
    batch: int, pace: float,
) -> tuple[float, dict[str, int]]:  # fmt: skip
    store = old_store(app_dsn, table)
    eraser = Eraser(store=store, checkpoints=checkpoints, batch=batch, pace=pace)
    ns = subject.namespace
    env = memory_forget(subject.scope, subject.tenant, ns, ts=time.time()).with_seq(1)
    try:
        started = time.perf_counter()
        await eraser.begin(env, subject)
        await eraser.erase(env, subject)
        await eraser.finish(env, subject, 1)
        seconds = time.perf_counter() - started
        async with store.transaction(subject.tenant) as tx:
            receipt = await eraser.erasures.get(tx.conn, subject.tenant, env.id)
        return seconds, dict(receipt.counts if receipt else {})
    finally:
        await store.close()


def _timed(idle: float, erase: Any) -> tuple[float, dict[str, int], tuple[float, float], float]:
    """Idle recall for ``idle`` seconds, then the erase: its time and receipt, the idle
    window and the erase's start (``time.monotonic``)."""
    idle_from = time.monotonic()
    time.sleep(idle)
    idle_to = time.monotonic()
    seconds, counts = run_async(erase)
    return seconds, counts, (idle_from, idle_to), time.monotonic() - seconds


def run(stack: contextlib.ExitStack, args: argparse.Namespace) -> list[Result]:
    sizes = QUICK if args.quick else FULL
    services = open_services(stack, args.admin_dsn, None, prefix="tulip-bench-forget-")
    table = f"forget_{uuid.uuid4().hex[:6]}"
    run_async(_migrate(services.app_dsn, table, services.admin_dsn))
    others = dataset(OTHER_ROWS if not args.quick else OTHER_ROWS // 4, OTHERS)
    run_async(_seed(services.app_dsn, table, others))
    qualified = f"public.{table}"
    victim = ("victim", "users", "u1")
    run_async(_insert(services.admin_dsn, qualified, "victim", "\x1f".join(victim),
                      sizes["memories"], sizes["turns"]))  # fmt: skip
    bigco_turns = sizes["threads"] * sizes["thread_turns"]
    run_async(_insert(services.admin_dsn, qualified, "bigco", "bigco\x1fusers\x1fall", 0,
                      bigco_turns))  # fmt: skip
    base = get_checkpointer(f"file://{services.tmp / 'checkpoints'}")
    assert isinstance(base, DeltaCheckpointer)
    run_async(_threads(base, "bigco", sizes["threads"], sizes["thread_turns"]))
    print(f"loaded (load average {os.getloadavg()[0]:.1f})", flush=True)
    results = []
    erases = [
        (f"namespace: {sizes['memories']:,} memories + {sizes['turns']:,} turns",
         sizes["memories"] + sizes["turns"],
         Subject.of({"tenant": "victim", "scope": "namespace", "namespace": list(victim)})),
        (f"tenant: {sizes['threads']:,} threads of {sizes['thread_turns']} turns",
         bigco_turns, Subject.of({"tenant": "bigco", "scope": "tenant"})),
    ]  # fmt: skip
    for label, rows, subject in erases:
        with RecallProbe(services.app_dsn, table, tenant_names(OTHERS), args.rate, "") as probe:
            probe.wait_ready()
            erase = _erase(services.app_dsn, table, base, subject, args.batch, args.pace)
            seconds, counts, (i0, i1), d0 = _timed(args.idle, erase)
            samples = probe.stop()
        results.append(
            Result(
                label,
                rows,
                seconds,
                counts,
                Latency.within("idle", samples, i0, i1),
                Latency.within("during", samples, d0, d0 + seconds),
            )
        )
    run_async(base.close())
    return results


async def _migrate(app_dsn: str, table: str, admin: str) -> None:
    store = old_store(app_dsn, table, admin)
    await store.migrate()
    await store.close()


async def _seed(app_dsn: str, table: str, data: dict[str, Any]) -> None:
    store = old_store(app_dsn, table)
    try:
        await seed(store, data)
    finally:
        await store.close()


def report(results: list[Result]) -> None:
    print(f"\nload average {os.getloadavg()[0]:.1f} (1 min)")
    print("| erase | rows | time to applied | rows/s | recall p50 idle -> during "
          "| recall p99 idle -> during | p99 ratio |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in results:
        ratio = r.during.p99 / r.idle.p99 if r.idle.p99 else float("nan")
        print(
            f"| {r.label} | {r.rows:,} | {r.seconds:.1f} s | {r.rows / r.seconds:,.0f} | "
            f"{r.idle.p50:.2f} -> {r.during.p50:.2f} ms | {r.idle.p99:.2f} -> "
            f"{r.during.p99:.2f} ms | {ratio:.2f}x |"
        )
    for r in results:
        print(f"receipt of {r.label}: {r.counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--rate", type=float, default=40.0, help="other tenants' recalls/s")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle recall first")
    parser.add_argument("--batch", type=int, default=2000, help="TULIP_ERASE_BATCH")
    parser.add_argument("--pace", type=float, default=1.0, help="TULIP_ERASE_PACE")
    parser.add_argument("--admin-dsn", help="an existing Postgres (else an embedded one)")
    args = parser.parse_args()
    raise SystemExit(bench_main(lambda stack: run(stack, args), report))


if __name__ == "__main__":
    main()

"""``tulip-memory retention``: per-tenant retention policies, and the job enforcing them.

``retention set --tenant T --turns-days 90 --dead-letters-days 30`` sets a tenant's
policy (an option left out keeps that kind forever: every default is off); ``retention
show`` lists them; ``retention run [--every SECONDS]`` removes, for every tenant with a
policy, turns older than its ``turns_days``, memories not observed (nor updated) in its
``memories_days``, dead letters older than its ``dead_letters_days`` and threads whose
newest checkpoint is older than its ``threads_days`` (head, history, name, summary).
Rows go in batches of ``--batch``, each followed by a rest of ``--pace`` times its own
time, so live recall keeps its share of the database. Progress is printed per tenant
and kind; totals go to Redis (``TULIP_REDIS_URL``) for ``tulip-memory metrics``
(``tulip_retention_removed_total{kind}``, ``tulip_retention_last_run_timestamp_seconds``).

Settings come from the environment: ``TULIP_DATABASE_ADMIN_URL`` (the job acts as
``tulip_ops``, which reads every tenant), ``TULIP_MEMORY_TABLE``,
``TULIP_CHECKPOINT_URL`` (threads), ``TULIP_REDIS_URL`` (metrics; optional).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.tenants import tenant_checkpointer
from tulip_memory.errors import TulipMemoryError
from tulip_memory.retention import KINDS, Policy, Retention
from tulip_memory.store.postgres.admin import as_operator
from tulip_memory.summaries import SummaryStore
from tulip_wire.topology import RETENTION_TALLY_KEY
from tulip_workers.deadletters import TABLE as LETTERS

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_BATCH, DEFAULT_PACE = 2000, 1.0
_OLDER = "now() - make_interval(days => $2)"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "retention",
        help="per-tenant retention policies and the job enforcing them",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rsub = p.add_subparsers(title="retention commands", required=True)
    put = rsub.add_parser("set", help="set a tenant's policy (unset kinds are kept forever)")
    put.add_argument("--tenant", required=True, help="the tenant (namespace[0])")
    for kind in KINDS:
        what = kind.removesuffix("_days").replace("_", " ")
        put.add_argument(
            f"--{kind.replace('_', '-')}", type=int, metavar="N", dest=kind,
            help=f"keep {what} N days (left out: kept forever)",
        )  # fmt: skip
    put.set_defaults(run=run_set)
    show = rsub.add_parser("show", help="every tenant's policy")
    show.set_defaults(run=run_show)
    job = rsub.add_parser("run", help="enforce every policy (paced)")
    job.add_argument("--batch", type=int, default=DEFAULT_BATCH, help="rows a batch removes")
    job.add_argument(
        "--pace", type=float, default=DEFAULT_PACE, help="rest after a batch, times its own time"
    )
    job.add_argument("--every", type=float, metavar="SECONDS", help="run again every SECONDS")
    job.add_argument("--heartbeat", metavar="PATH", help="touch PATH after each run that succeeds")
    job.set_defaults(run=run_job)


def _admin() -> str:
    from tulip_ops.settings import OpsSettings

    admin = OpsSettings.from_env().database_admin_url
    if not admin:
        raise ValueError("set TULIP_DATABASE_ADMIN_URL (the administrator DSN)")
    return admin


async def _operator(admin: str) -> Any:
    conn = await asyncpg.connect(admin)
    await as_operator(conn)
    return conn


def run_set(args: argparse.Namespace) -> int:
    policy = Policy(args.tenant, *(getattr(args, k) for k in KINDS))

    async def go() -> None:
        conn = await _operator(_admin())
        try:
            await Retention().put(conn, policy)
        finally:
            await conn.close()

    asyncio.run(go())
    print(_describe(policy))
    return EXIT_OK


def run_show(args: argparse.Namespace) -> int:
    async def go() -> list[Policy]:
        conn = await _operator(_admin())
        try:
            return await Retention().all(conn)
        finally:
            await conn.close()

    for policy in asyncio.run(go()):
        print(_describe(policy))
    return EXIT_OK


def _describe(p: Policy) -> str:
    kept = [f"{k.removesuffix('_days')} {getattr(p, k)} days" for k in KINDS if getattr(p, k)]
    return f"{p.tenant}: " + (", ".join(kept) if kept else "off (everything kept)")


def run_job(args: argparse.Namespace) -> int:
    if args.batch < 1 or args.pace < 0 or (args.every or 1) <= 0:
        print("error: --batch >= 1, --pace >= 0, --every > 0", file=sys.stderr)
        return EXIT_USAGE
    admin = _admin()
    while True:
        try:
            removed = asyncio.run(enforce_all(admin, args.batch, args.pace, print))
        except (TulipMemoryError, PermissionError, OSError, asyncpg.PostgresError) as e:
            print(f"error: {e}", file=sys.stderr)
            if args.every is None:
                return EXIT_FAILED
        else:
            total = ", ".join(f"{k} {n}" for k, n in sorted(removed.items())) or "nothing"
            print(f"retention run done: removed {total}", flush=True)
            if args.heartbeat:
                Path(args.heartbeat).touch()
        if args.every is None:
            return EXIT_OK
        time.sleep(args.every)


async def enforce_all(
    admin: str, batch: int, pace: float, say: Callable[[str], Any]
) -> dict[str, int]:
    """Every tenant's policy, enforced once; the totals removed per kind."""
    from tulip_memory.config import StoreSettings
    from tulip_memory.registry import get_checkpointer
    from tulip_ops.settings import OpsSettings

    store = StoreSettings.from_env().store()
    table = store.table  # the qualified name; the store itself never connects here
    await store.close()
    url = OpsSettings.from_env().checkpoint_url
    base = get_checkpointer(url) if url else None
    checkpoints = base if isinstance(base, DeltaCheckpointer) else None
    conn = await _operator(admin)
    totals: dict[str, int] = {}
    try:
        for policy in await Retention().all(conn):
            job = _Job(conn, table, policy, batch, pace)
            for kind, n in (await job.run(checkpoints)).items():
                totals[kind] = totals.get(kind, 0) + n
                say(f"{policy.tenant}: {kind} {n} removed")
    finally:
        await conn.close()
        if checkpoints is not None:
            await checkpoints.close()
    _tally(totals)
    return totals


class _Job:
    """One tenant's policy, enforced in paced batches."""

    def __init__(self, conn: Any, table: str, policy: Policy, batch: int, pace: float) -> None:
        self.conn, self.table, self.policy = conn, table, policy
        self.batch, self.pace = batch, pace

    async def run(self, checkpoints: DeltaCheckpointer | None) -> dict[str, int]:
        p, t = self.policy, self.table
        done: dict[str, int] = {}
        rows = {
            "turns": (p.turns_days, f"{t}_turns", f"created_at < {_OLDER}"),
            "memories": (p.memories_days, t, f"coalesce(observed_at, updated_at) < {_OLDER}"),
            "dead_letters": (p.dead_letters_days, LETTERS, f"failed_at < {_OLDER}"),
        }
        for kind, (days, table, older) in rows.items():
            if days is not None:
                done[kind] = await self._delete(table, older, days)
        if p.threads_days is not None and checkpoints is not None:
            done["threads"] = await self._threads(checkpoints, p.threads_days)
        return done

    async def _delete(self, table: str, older: str, days: int) -> int:
        stmt = (
            f"DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} "
            f"WHERE tenant = $1 AND {older} LIMIT $3))"
        )
        n = 0
        while True:
            started = time.perf_counter()
            status = await self.conn.execute(stmt, self.policy.tenant, days, self.batch)
            done = int(status.split()[-1])
            n += done
            if done < self.batch:
                return n
            await asyncio.sleep(self.pace * (time.perf_counter() - started))

    async def _threads(self, checkpoints: DeltaCheckpointer, days: int) -> int:
        """Threads whose newest checkpoint is older than ``days``."""
        cutoff = datetime.now(UTC) - timedelta(days=days)
        threads = tenant_checkpointer(checkpoints, self.policy.tenant)
        n = 0
        async for thread in threads.iter_threads():
            started = time.perf_counter()
            newest = await threads.list_checkpoints(thread, limit=1)
            meta = await threads.get_metadata(thread, newest[0]) if newest else None
            if meta is not None and meta.created_at >= cutoff:
                continue
            await threads.delete(thread)
            await threads.storage.delete_objects([SummaryStore.key(thread)])
            n += 1
            await asyncio.sleep(self.pace * (time.perf_counter() - started))
        return n


def _tally(totals: dict[str, int]) -> None:
    """Totals for ``tulip-memory metrics`` (nothing without a Redis)."""
    from tulip_wire import env as wire
    from tulip_wire.endpoints import redis_client

    url = wire.redis_url(None)
    if not url:
        return
    client = redis_client(url)
    try:
        for kind, n in totals.items():
            client.hincrby(RETENTION_TALLY_KEY, kind, n)
        client.hset(RETENTION_TALLY_KEY, "last_run", f"{time.time():.0f}")
    except Exception as e:  # the run itself is done; only its metric is missing
        print(f"warning: retention totals not stored ({type(e).__name__})", file=sys.stderr)
    finally:
        client.close()

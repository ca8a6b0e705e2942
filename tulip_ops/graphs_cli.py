"""``tulip-memory graphs``: build and drop the big namespaces' own HNSW graphs.

Recall of a namespace that is a small share of a big table reads its nearest rows
from a graph of its own (a partial HNSW index over its rows) once this command has
built one; see :mod:`tulip_memory.reindex.graphs`. Run it after a load, and then now
and then (``--every``) as namespaces grow: each run builds what the namespaces need
(concurrently: writes and recall go on) and drops what they no longer do.

Settings come from the environment: ``TULIP_DATABASE_URL`` and ``TULIP_MEMORY_TABLE``
(the table) and ``TULIP_DATABASE_ADMIN_URL`` (the administrator DSN, or a role that
is a member of ``tulip_owner``: it builds the indexes and reads every tenant's
namespace counters as ``tulip_ops``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg

from tulip_memory.errors import DatabaseUnreachable, TulipMemoryError
from tulip_memory.reindex.graphs import MIN_ROWS, MOST, PER_TENANT, Graphs, Refreshed
from tulip_ops.failures import named

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "graphs",
        help="build and drop the big namespaces' own HNSW graphs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--most", type=int, default=MOST, help=f"namespaces per table with one (default {MOST})"
    )
    p.add_argument(
        "--min-rows",
        type=int,
        default=MIN_ROWS,
        help=f"rows from which a namespace gets one (default {MIN_ROWS:,})",
    )
    p.add_argument(
        "--per-tenant",
        type=int,
        default=PER_TENANT,
        help=f"namespaces of one tenant per table with one (default {PER_TENANT})",
    )
    p.add_argument(
        "--every", type=float, metavar="SECONDS", help="run again every SECONDS, until stopped"
    )
    p.add_argument(
        "--heartbeat",
        metavar="PATH",
        help="touch PATH after each run that succeeds (a healthcheck reads its age)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tulip_ops.settings import OpsSettings

    admin = OpsSettings.from_env().admin_url("tulip-memory graphs")
    if min(args.most, args.per_tenant) < 0 or args.min_rows < 1 or (args.every or 1) <= 0:
        print("error: --most, --per-tenant >= 0, --min-rows >= 1, --every > 0", file=sys.stderr)
        return EXIT_USAGE
    while True:
        try:
            done = asyncio.run(_refresh(admin, args))
        except (TulipMemoryError, PermissionError, OSError, asyncpg.PostgresError) as e:
            shown = named(e) if isinstance(e, DatabaseUnreachable) else e
            print(f"error: {shown}", file=sys.stderr)
            if args.every is None:
                return EXIT_FAILED
        else:
            print(_summary(done), flush=True)
            if args.heartbeat:
                Path(args.heartbeat).touch()
        if args.every is None:
            return EXIT_OK
        time.sleep(args.every)


async def _refresh(admin: str, args: argparse.Namespace) -> Refreshed:
    from tulip_memory.config import store_from_env

    store = store_from_env()
    caps = {"most": args.most, "min_rows": args.min_rows, "per_tenant": args.per_tenant}
    try:
        return await Graphs(store, admin, **caps).refresh()
    finally:
        await store.close()


def _summary(done: Refreshed) -> str:
    lines = [f"built {g}" for g in done.built] + [f"dropped {g}" for g in done.dropped]
    lines.append(
        f"namespace graphs: {len(done.built)} built, {len(done.dropped)} dropped, "
        f"{len(done.kept)} kept"
    )
    return "\n".join(lines)

"""``tulip-memory threads adopt``: move threads saved before thread state had a tenant.

Thread state is keyed by (tenant, thread id) (:mod:`tulip_memory.delta.tenants`).
Threads a pipeline wrote before that sit at the root of ``TULIP_CHECKPOINT_URL``,
where no ``Reader.load(..., tenant=...)`` reaches them. This command moves them into
the tenant that owns them (history, head, name and summary, copied server-side, then
deleted at the root). Which tenant owns a thread only the operator knows: name the
threads (or ``--all`` for a single-tenant deployment). Run it with the checkpoint
workers stopped and the checkpoint queues drained.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from tulip_memory.credentials import redact_url
from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.keys import tenant_part
from tulip_memory.delta.tenants import adopt_thread
from tulip_memory.registry import get_checkpointer
from tulip_ops.settings import OpsSettings


def add_parser(sub: Any) -> None:
    threads = sub.add_parser(
        "threads",
        help="thread state maintenance (TULIP_CHECKPOINT_URL)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    threads_sub = threads.add_subparsers(title="threads commands", required=True)
    adopt = threads_sub.add_parser("adopt", help="move tenant-less threads into a tenant")
    adopt.add_argument("--tenant", required=True, help="the tenant that owns the threads")
    which = adopt.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every tenant-less thread")
    which.add_argument("thread_ids", nargs="*", default=[], help="these threads")
    adopt.set_defaults(run=run_adopt)


def run_adopt(args: argparse.Namespace) -> int:
    url = OpsSettings.from_env().checkpoint_url
    if not url:
        print("set TULIP_CHECKPOINT_URL to the store the workers write", file=sys.stderr)
        return 2
    base = get_checkpointer(url)
    if not isinstance(base, DeltaCheckpointer):
        print(f"TULIP_CHECKPOINT_URL is not a checkpoint store: {redact_url(url)}", file=sys.stderr)
        return 2
    try:
        moved, missing = asyncio.run(_adopt(base, args.tenant, args.all, args.thread_ids))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{moved} thread(s) moved into tenant {args.tenant!r}")
    for thread in missing:
        print(f"not found at the root (already moved?): {thread!r}", file=sys.stderr)
    return 1 if missing else 0


async def _adopt(
    base: DeltaCheckpointer, tenant: str, every: bool, thread_ids: list[str]
) -> tuple[int, list[str]]:
    try:
        tenant_part(tenant)  # a bad tenant is refused before anything moves
        targets = await base.list_threads() if every else list(thread_ids)
        moved, missing = 0, []
        for thread in targets:
            if await adopt_thread(base.storage, tenant, thread):
                moved += 1
            else:
                missing.append(thread)
        return moved, missing
    finally:
        await base.close()

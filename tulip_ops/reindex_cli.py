"""``tulip-memory reindex``: start, watch, resume, cancel and finalize online reindexes.

Settings come from the environment: ``TULIP_DATABASE_URL`` and ``TULIP_MEMORY_TABLE``
(the table), ``TULIP_DATABASE_ADMIN_URL`` (to list tenants when reindexing all of
them), ``TULIP_BROKER_URL`` (where batches go: ``memory.reindex``) and
``TULIP_EVENT_SIGNING_KEY`` (batches are signed with it, as the workers require).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from tulip_memory.reindex.model import Progress, ReindexError
from tulip_memory.reindex.progress import ProgressBar, describe
from tulip_memory.reindex.reindexer import MAX_BATCH, Reindexer

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_DETACHED = 0, 1, 2, 130


DESCRIPTION = """\
Start, watch, resume, cancel and finalize online reindexes.

Settings come from the environment: TULIP_DATABASE_URL and TULIP_MEMORY_TABLE
(the table), TULIP_DATABASE_ADMIN_URL (to list tenants when reindexing all of
them), TULIP_BROKER_URL (where batches go: the memory.reindex queue) and
TULIP_EVENT_SIGNING_KEY (batches are signed with it, as the workers require).
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "reindex",
        help="move the table's vectors to another embedding model while it serves",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", help="the new model: hashing[:N], local[:name], provider/model")
    p.add_argument("--api-base", help="the new model's API base URL (litellm models)")
    p.add_argument("--tenant", help="only this tenant (default: every tenant)")
    p.add_argument(
        "--batch", type=int, default=512, help=f"rows per batch task (1..{MAX_BATCH}, default 512)"
    )
    action = p.add_mutually_exclusive_group()
    action.add_argument("--status", action="store_true", help="show the scope's job and exit")
    action.add_argument("--resume", action="store_true", help="go on with a stopped job")
    action.add_argument("--cancel", action="store_true", help="stop the scope's job")
    action.add_argument(
        "--finalize",
        action="store_true",
        help="end the job: after the switch remove the old vectors, before it abandon the job",
    )
    p.add_argument("--detach", action="store_true", help="start or resume, then return")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from tulip_ops.dev.embedded import run_async

    if not (args.status or args.resume or args.cancel or args.finalize) and not args.model:
        print("error: --model NEW is needed to start a reindex", file=sys.stderr)
        return EXIT_USAGE
    try:
        result: int = run_async(_run(args))
    except ReindexError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(
            "\ndetached: the job goes on on the reindex workers; "
            f"`{_again(args.tenant, '--status')}` shows it, "
            f"`{_again(args.tenant, '--cancel')}` stops it",
            file=sys.stderr,
        )
        return EXIT_DETACHED
    return result


async def _run(args: argparse.Namespace) -> int:
    from tulip_memory.config import store_from_env
    from tulip_ops.settings import OpsSettings
    from tulip_wire.signing import signer_of
    from tulip_workers.reindexing import batch_sender

    store = store_from_env()
    if args.model:
        store.allow_embedder(args.model, args.api_base)
    ops = OpsSettings.from_env()
    send = batch_sender(signer_of(ops.signing_key))
    reindexer = Reindexer(store, send=send, admin_dsn=ops.database_admin_url)
    try:
        return await _act(reindexer, args)
    finally:
        await store.close()


async def _act(reindexer: Reindexer, args: argparse.Namespace) -> int:
    if args.status:
        progress = await reindexer.status(args.tenant)
        if progress is None:
            scope = f"tenant {args.tenant!r}" if args.tenant else "the table"
            print(f"no reindex job for {scope}; `{_again(args.tenant, '--model NEW')}` starts one")
            return EXIT_OK
        print("\n".join(describe(progress)))
        return EXIT_OK
    if args.cancel:
        job = await reindexer.cancel(args.tenant)
        print(
            f"job {job.id} cancelled; `{_again(args.tenant, '--resume')}` goes on, "
            f"`{_again(args.tenant, '--finalize')}` abandons it"
        )
        return EXIT_OK
    if args.finalize:
        job = await reindexer.finalize(args.tenant)
        what = job.error or f"old vectors removed; recall stays on {job.spec}"
        print(f"job {job.id} finalized: {what}")
        return EXIT_OK
    if args.resume:
        job = await reindexer.resume(args.tenant)
    else:
        job = await reindexer.start(
            args.model, tenant=args.tenant, batch=args.batch, api_base=args.api_base
        )
    print(f"job {job.id}: {job.planned_rows:,} rows to {job.spec} in batches of {job.batch}")
    if args.detach:
        print(f"detached; `{_again(args.tenant, '--status')}` shows progress")
        return EXIT_OK
    bar = ProgressBar(sys.stdout)
    try:
        progress = await reindexer.watch(job.id, bar.update)
    finally:
        bar.close()
    return _outcome(progress, args.tenant)


def _outcome(p: Progress, tenant: str | None) -> int:
    job = p.job
    if job.status == "switched":
        print(f"recall now reads {job.spec}; `{_again(tenant, '--finalize')}` removes old vectors")
        return EXIT_OK
    print(f"job {job.id} {job.status}: {job.error or ''}".rstrip(": "), file=sys.stderr)
    if job.status == "paused":
        print(f"fix the cause, then `{_again(tenant, '--resume')}`", file=sys.stderr)
    return EXIT_FAILED


def _again(tenant: str | None, flags: str) -> str:
    """The command to type next, copyable: a tenant's job is only reached with its
    ``--tenant``."""
    scope = f" --tenant {shlex.quote(tenant)}" if tenant else ""
    return f"tulip-memory reindex {flags}{scope}"

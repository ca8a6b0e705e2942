"""The ``tulip-memory`` command line.

Errors a user can fix (a setting missing or malformed, an option out of range, a
service that does not answer) print one ``error:`` line naming the variable or option
and exit non-zero; argparse's own usage errors are one line too.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from tulip_memory.errors import DatabaseUnreachable, TulipMemoryError
from tulip_ops.argtypes import at_least, port
from tulip_ops.dev.supervisor import POOLED, ROLES
from tulip_ops.failures import named
from tulip_ops.placeholders import deployment_problems
from tulip_wire.logs import configure as configure_logs

if TYPE_CHECKING:
    from tulip_ops.claim import Claim
    from tulip_ops.dev.stack import DevStack

DESCRIPTION = (
    "The tulip-memory pipeline's processes and tools: a development stack, the workers "
    "of each role, database provisioning, dead letters and online reindexes."
)
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse with plain help (commands may take their description from an RST
    docstring) and one-line errors: the command, the problem, where help is."""

    def format_help(self) -> str:
        return plain_text(super().format_help())

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def plain_text(text: str) -> str:
    """RST inline markup as plain text: ``x`` and :role:`x` become x."""
    return _RST_ROLE.sub(r"\1", text).replace("``", "")


_RST_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        configure_logs()  # TULIP_LOG_FORMAT=json: the supervisor's own lines too
    except ValueError as e:
        return _fail(e, EXIT_USAGE)
    if not hasattr(args, "run"):
        parser.print_help()
        return EXIT_USAGE
    if problems := deployment_problems(os.environ):
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result: int = args.run(args)
    except DatabaseUnreachable as e:  # a service that does not answer: name its variable
        return _fail(named(e), 1)
    except (ValueError, TulipMemoryError) as e:  # configuration: the message names it
        return _fail(e, EXIT_USAGE)
    except OSError as e:  # a service that does not answer
        return _fail(e, 1)
    return result


def _fail(error: BaseException, code: int) -> int:
    message = " ".join(str(error).split()) or type(error).__name__
    print(f"error: {message}", file=sys.stderr)
    return code


def version() -> str:
    try:
        return importlib.metadata.version("tulip-memory")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tulip-memory", description=DESCRIPTION)
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version()}", help="print the version"
    )
    sub = parser.add_subparsers(title="commands")
    dev = sub.add_parser("dev", help="run the stack on embedded services under one data dir")
    dev.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".tulip-dev"),
        help="where the stack keeps its data, sockets, logs and tulip.env (default: .tulip-dev)",
    )
    dev.add_argument("--demo", action="store_true", help="run the demo workload, check, exit")
    dev.add_argument("--tenants", type=at_least(1), default=5, help="demo: number of tenants")
    dev.add_argument("--users", type=at_least(1), default=40, help="demo: users per tenant")
    dev.add_argument("--shards", type=at_least(1), default=2, help="ordered shard queues per role")
    dev.add_argument("--no-flower", action="store_true", help="do not start Flower")
    dev.set_defaults(run=_dev)

    worker = sub.add_parser("worker", help="run and supervise the Celery workers of a role")
    worker.add_argument("role", choices=sorted([*ROLES, *POOLED]), help="the role to run")
    worker.add_argument(
        "--shards",
        type=int,
        nargs="+",
        metavar="K",
        help="only these shard numbers, 0..TULIP_<ROLE>_SHARDS-1 (default: every shard)",
    )
    worker.add_argument(
        "--concurrency",
        type=int,
        help="extract/checkpoint: events one shard worker runs at once, each key in order "
        "(default: TULIP_EXTRACT_CONCURRENCY / TULIP_CHECKPOINT_CONCURRENCY, else 16)",
    )
    worker.add_argument(
        "--claim",
        action="store_true",
        help="extract/checkpoint: join the role's pool; run the shards it assigns to this "
        "member (run as many members, on as many hosts, as wanted: each shard is owned by "
        "one, rebalanced as members come and go; docs/shards.md)",
    )
    worker.add_argument("--log-dir", type=Path, help="one log file per worker (default: stdout)")
    worker.add_argument(
        "--config",
        metavar="MODULE",
        help="Celery settings module, importable from the current directory (as celery "
        "--config; e.g. the repository's celeryconfig.py); default: tulip_wire.celeryconfig",
    )
    worker.set_defaults(run=_worker)

    provision = sub.add_parser(
        "provision",
        help="create the roles, move ownership to tulip_owner and run every migration "
        "(TULIP_DATABASE_ADMIN_URL needed)",
    )
    provision.add_argument(
        "--role", default="tulip_app", help="the application role (default: tulip_app)"
    )
    provision.add_argument(
        "--schema", default="public", help="the schema it may create tables in (default: public)"
    )
    provision.set_defaults(run=_provision)

    from tulip_ops.forget_cli import add_parser as add_forget
    from tulip_ops.graphs_cli import add_parser as add_graphs
    from tulip_ops.reindex_cli import add_parser as add_reindex
    from tulip_ops.reshard_cli import add_parser as add_reshard
    from tulip_ops.retention_cli import add_parser as add_retention
    from tulip_ops.threads_cli import add_parser as add_threads

    add_reindex(sub)
    add_graphs(sub)
    add_reshard(sub)
    add_threads(sub)
    add_forget(sub)
    add_retention(sub)

    from tulip_ops.import_cli import add_parser as add_import
    from tulip_ops.keys_cli import add_parser as add_keys

    add_import(sub)
    add_keys(sub)

    serve = sub.add_parser(
        "serve", help="run the HTTP service (/v1, OpenAPI at /openapi.json; docs/http.md)"
    )
    serve.add_argument(
        "--address", default="127.0.0.1", help="address to bind (default: 127.0.0.1)"
    )
    serve.add_argument("--port", type=port, help="port (default: TULIP_HTTP_PORT, else 8080)")
    serve.set_defaults(run=_serve)

    metrics = sub.add_parser(
        "metrics", help="serve Prometheus /metrics: queue depths, dead letters, LLM slots"
    )
    metrics.add_argument("--port", type=port, default=9808, help="port (default: 9808)")
    metrics.add_argument(
        "--address", default="127.0.0.1", help="address to bind (default: 127.0.0.1)"
    )
    metrics.set_defaults(run=_metrics)

    dlq = sub.add_parser(
        "dlq",
        help="inspect and replay dead letters (TULIP_DATABASE_ADMIN_URL: an administrator "
        "DSN that can read every tenant's dead letters)",
    )
    dlq_sub = dlq.add_subparsers(title="dlq commands", required=True)
    listing = dlq_sub.add_parser("list", help="newest dead letters first")
    listing.add_argument(
        "--limit", type=at_least(1), default=50, help="at most this many letters (default: 50)"
    )
    listing.add_argument("--all", action="store_true", help="include replayed ones")
    listing.set_defaults(run=_dlq, action="list")
    show = dlq_sub.add_parser("show", help="one dead letter with its event body")
    replay = dlq_sub.add_parser("replay", help="re-publish with the original sequence number")
    for command in (show, replay):
        command.add_argument("event_id", help="the dead event's id")
        command.add_argument(
            "--tenant",
            help="the letter's tenant; needed only when tenants hold letters of the same id",
        )
    show.set_defaults(run=_dlq, action="show")
    replay.set_defaults(run=_dlq, action="replay")
    return parser


def _dev(args: argparse.Namespace) -> int:
    from tulip_ops.dev.lock import StackRunning
    from tulip_ops.dev.stack import DevStack

    started = time.perf_counter()
    stack = DevStack(args.data_dir, shards=args.shards, with_flower=not args.no_flower)
    stop = _stop_on_signals()
    try:
        stack.claim()
    except StackRunning as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"starting the stack under {stack.data_dir} ...", flush=True)
    stack.start()
    try:
        print(f"settings written to {stack.env_file}")
        if stack.flower is not None:
            print(f"Flower: {stack.flower.url} (user {stack.flower.user}, password in tulip.env)")
        if stack.metrics is not None:
            print(f"metrics: {stack.metrics.url}")
        if stack.http is not None:
            print(f"HTTP service: {stack.http.url} (a key of tenant demo: TULIP_HTTP_DEMO_KEY)")
        assert stack.workers is not None
        print(f"workers: {', '.join(stack.workers.pids())}", flush=True)
        if args.demo:
            return _demo(stack, args, started)
        print("running; press Ctrl-C to stop", flush=True)
        while not stop.wait(1.0):
            stack.workers.check()
        return 0
    finally:
        stack.stop()
        print("stopped", flush=True)


def _demo(stack: DevStack, args: argparse.Namespace, started: float) -> int:
    from tulip_ops.dev.demo import run_pipeline_demo

    run_id = f"demo-{uuid.uuid4().hex[:8]}"
    print(f"demo {run_id}: {args.tenants} tenants x {args.users} users, two sessions each")
    report = run_pipeline_demo(
        stack.settings, run_id=run_id, tenants=args.tenants, users=args.users
    )
    for line in report.lines():
        print(f"  {line}")
    print(f"  wall time         {time.perf_counter() - started:.1f}s (services included)")
    return 0 if report.ok else 1


def _worker(args: argparse.Namespace) -> int:
    from tulip_ops.dev.supervisor import ROLES, Supervisor, role_specs, worker_env
    from tulip_wire import celeryconfig
    from tulip_wire.env import broker_url

    shards = (
        celeryconfig.CHECKPOINT_SHARDS if args.role == "checkpoint" else celeryconfig.EXTRACT_SHARDS
    )
    if args.claim and args.role not in ROLES:
        raise ValueError(f"--claim is for the shard roles ({', '.join(sorted(ROLES))})")
    if args.claim and args.shards:
        raise ValueError("--claim and --shards exclude each other: the pool assigns shards")
    specs = [] if args.claim else role_specs(args.role, shards, args.shards, args.concurrency)
    broker_url()  # no guess: unset, one line naming the variable
    claims = [_claim(args, shards)] if args.claim else []
    env = worker_env({"CELERY_CONFIG_MODULE": args.config} if args.config else {})
    supervisor = Supervisor(specs, env, args.log_dir, claims=claims)
    stop = _stop_on_signals()
    supervisor.start()
    print(f"{args.role} workers: {supervisor.pids()}", flush=True)
    try:
        while not stop.wait(1.0):
            supervisor.check()
    finally:
        supervisor.stop()
    return 0


def _claim(args: argparse.Namespace, shards: int) -> Claim:
    """This process's membership of the role's shard pool (``--claim``)."""
    from tulip_ops.claim import Claim
    from tulip_wire.endpoints import redis_client
    from tulip_wire.env import redis_url
    from tulip_workers.settings import SHARD_LEASE_SECONDS

    url = redis_url()
    if url is None:
        raise ValueError("--claim keeps the pool's members in Redis: set TULIP_REDIS_URL")
    client = redis_client(url, socket_timeout=5, socket_connect_timeout=5)
    return Claim(args.role, shards, client, SHARD_LEASE_SECONDS.read(), args.concurrency)


def _dlq(args: argparse.Namespace) -> int:
    from tulip_ops.dev.embedded import run_async
    from tulip_ops.settings import OpsSettings

    url = OpsSettings.from_env().admin_url(f"tulip-memory dlq {args.action}")
    try:
        lines: list[str] = run_async(_dlq_async(url, args))
    except (LookupError, ValueError, PermissionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


async def _dlq_async(url: str, args: argparse.Namespace) -> list[str]:
    from tulip_memory.store.postgres.connect import connect
    from tulip_workers import dlq

    conn = await connect(url, "TULIP_DATABASE_ADMIN_URL")
    try:
        await dlq.as_operator(conn)
        if args.action == "list":
            letters = await dlq.list_dead(conn, limit=args.limit, include_replayed=args.all)
            return [dlq.describe(d) for d in letters] or ["no dead letters"]
        if args.action == "show":
            letter = await dlq.show(conn, args.event_id, args.tenant)
            return [dlq.describe(letter), letter.body]
        from tulip_producer import Producer

        with Producer.from_env() as producer:
            letter = await dlq.replay(conn, args.event_id, producer.republish, args.tenant)
        return [
            f"replayed {letter.event_id} of tenant {letter.tenant} (seq {letter.seq}) "
            "to its shard queue"
        ]
    finally:
        await conn.close()


def _provision(args: argparse.Namespace) -> int:
    import os

    from tulip_ops.dev.embedded import run_async
    from tulip_ops.provision import configured_store, provision
    from tulip_ops.settings import OpsSettings

    settings = OpsSettings.from_env()
    admin = settings.admin_url("tulip-memory provision")
    store = configured_store(admin, os.environ)

    async def go() -> None:
        try:
            await provision(
                admin,
                args.role,
                password=settings.app_password,
                ops_password=settings.ops_password,
                schema=args.schema,
                stores=[store],
            )
        finally:
            await store.close()

    try:
        run_async(go())
    except (PermissionError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(
        f"roles ready: {args.role} (LOGIN, DML only, owns nothing), tulip_owner (owns "
        f"{store.table} and the ledger, runs migrations), tulip_ops (dlq and all-tenant "
        "reindex: BYPASSRLS, not superuser); migrations applied"
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    from tulip_service.serve import serve

    return serve(args.address, args.port)


def _metrics(args: argparse.Namespace) -> int:
    from tulip_ops.metrics import serve
    from tulip_wire.env import broker_url

    broker_url()  # no guess: an unrelated Redis's empty queues would look healthy
    stop = _stop_on_signals()
    server, _ = serve(args.port, args.address)
    print(f"metrics: http://{args.address}:{server.server_port}/metrics", flush=True)
    stop.wait()
    server.shutdown()
    return 0


def _stop_on_signals() -> threading.Event:
    """An event set by SIGINT or SIGTERM, so cleanup runs in the main thread."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


if __name__ == "__main__":
    sys.exit(main())

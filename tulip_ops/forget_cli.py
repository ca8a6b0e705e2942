"""``tulip-memory forget``: erase a tenant, a namespace, some of its messages, or a thread.

The erase is an ordinary event published through the producer (``TULIP_BROKER_URL``,
``TULIP_REDIS_URL``), ordered with the subject's other events, applied by the workers
in every store; the command waits for its receipt (``TULIP_DATABASE_URL``) and prints
what was removed per store. ``--dry-run`` publishes nothing and prints what an erase
would remove now (Postgres as the tenant, checkpoints from ``TULIP_CHECKPOINT_URL``).
Every connection string comes from the environment, never from the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping
from typing import Any

from tulip_memory.config import store_from_env
from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.registry import get_checkpointer
from tulip_ops.settings import OpsSettings
from tulip_wire import forget as scopes
from tulip_workers.erasing import Eraser, Subject

EXIT_TIMEOUT = 3


def add_parser(sub: Any) -> None:
    forget = sub.add_parser(
        "forget",
        help="erase a tenant, a namespace, messages or a thread from every store",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    forget.add_argument("--tenant", required=True, help="the tenant (namespace[0])")
    what = forget.add_mutually_exclusive_group()
    what.add_argument(
        "--namespace", nargs="+", metavar="PART",
        help="the namespace's parts after the tenant (e.g. --namespace users u42)",
    )  # fmt: skip
    what.add_argument("--thread", help="a thread id of the tenant")
    forget.add_argument(
        "--messages", nargs="+", metavar="ID",
        help="with --namespace: only the memories and turns of these message ids",
    )  # fmt: skip
    forget.add_argument("--dry-run", action="store_true", help="print the counts, erase nothing")
    forget.add_argument(
        "--timeout", type=float, default=3600.0,
        help="seconds to wait for the receipt (default 3600; exit 3 when it is not there)",
    )  # fmt: skip
    forget.set_defaults(run=run_forget)


def subject_of(args: argparse.Namespace) -> Subject:
    """The subject the options name (checked as the event's payload would be)."""
    tenant = args.tenant
    if args.messages and not args.namespace:
        raise ValueError("--messages needs --namespace")
    if args.thread is not None:
        payload: dict[str, Any] = {"tenant": tenant, "thread_id": args.thread}
        problem = scopes.problem(True, payload)
    else:
        ns = (tenant, *args.namespace) if args.namespace else None
        scope = scopes.TENANT if ns is None else scopes.NAMESPACE
        scope = scopes.MESSAGES if args.messages else scope
        payload = scopes.memory_payload(scope, tenant, ns, args.messages)
        problem = scopes.problem(False, payload)
    if problem is not None:
        raise ValueError(problem)
    return Subject.of(payload)


def run_forget(args: argparse.Namespace) -> int:
    subject = subject_of(args)
    if args.dry_run:
        counts = asyncio.run(_dry_run(subject))
        print(f"would erase ({_what(subject)}):")
        _print_counts(counts)
        return 0
    from tulip_producer import Producer, Reader

    with Producer.from_env() as producer:
        event_id = _publish(producer, subject)
        print(f"erase {event_id} published ({_what(subject)}); waiting for its receipt")
        delivered = producer.flush(timeout=args.timeout)
    if not delivered:
        print("error: the erase is still in the producer's spool", file=sys.stderr)
        return EXIT_TIMEOUT
    deadline = time.monotonic() + args.timeout
    with Reader.from_env() as reader:
        while True:
            status = reader.status(event_id, tenant=subject.tenant)
            if status.state in ("applied", "superseded", "dead"):
                break
            if time.monotonic() > deadline:
                print(f"error: erase {event_id} not applied in {args.timeout:g}s", file=sys.stderr)
                return EXIT_TIMEOUT
            time.sleep(0.5)
    if status.state == "dead":
        print(f"error: erase {event_id} is a dead letter: {status.reason}", file=sys.stderr)
        return 1
    print(f"erase {event_id} {status.state} at {status.erased_at}:")
    _print_counts(status.erased or {})
    return 0


def _publish(producer: Any, s: Subject) -> str:
    if s.scope == scopes.THREAD:
        assert s.thread_id is not None
        return str(producer.forget_thread(s.thread_id, tenant=s.tenant))
    if s.scope == scopes.TENANT:
        return str(producer.forget_tenant(s.tenant))
    assert s.namespace is not None
    if s.scope == scopes.MESSAGES:
        return str(producer.forget_messages(s.namespace, list(s.message_ids)))
    return str(producer.forget(s.namespace))


def _what(s: Subject) -> str:
    if s.scope == scopes.THREAD:
        return f"thread {s.thread_id!r} of tenant {s.tenant!r}"
    if s.scope == scopes.TENANT:
        return f"every store of tenant {s.tenant!r}"
    what = f"namespace {s.namespace!r}"
    return f"{len(s.message_ids)} message(s) of {what}" if s.message_ids else what


def _print_counts(counts: Mapping[str, int]) -> None:
    for store in sorted(counts):
        print(f"  {store:14} {counts[store]}")


async def _dry_run(subject: Subject) -> dict[str, int]:
    url = OpsSettings.from_env().checkpoint_url
    checkpoints = get_checkpointer(url) if url else None
    store = store_from_env()
    try:
        cp = checkpoints if isinstance(checkpoints, DeltaCheckpointer) else None
        return await Eraser(store=store, checkpoints=cp).count(subject)
    finally:
        await store.close()
        if isinstance(checkpoints, DeltaCheckpointer):
            await checkpoints.close()

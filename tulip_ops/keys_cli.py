"""``tulip-memory keys``: the HTTP service's API keys (``create``, ``list``, ``revoke``).

Keys are made and revoked by the operators, through the administrator DSN
(``TULIP_DATABASE_ADMIN_URL``, acting as ``tulip_ops``): the application role may read
them, never write one (see :mod:`tulip_service.keys`). A new key is printed once; only
its hash is kept. A revoked key is refused by every service within
``TULIP_HTTP_KEY_CACHE_SECONDS``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from tulip_ops.settings import OpsSettings
from tulip_service import keys


def add_parser(sub: Any) -> None:
    cmd = sub.add_parser(
        "keys",
        help="API keys of the HTTP service: create, list, revoke (TULIP_DATABASE_ADMIN_URL)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    keys_sub = cmd.add_subparsers(title="keys commands", required=True)
    create = keys_sub.add_parser("create", help="a new key of a tenant, printed once")
    create.add_argument("--tenant", required=True, help="the tenant the key acts for")
    create.add_argument(
        "--scope",
        choices=keys.SCOPES,
        default="all",
        help="read (GET), write (POST) or all (default: all)",
    )
    create.add_argument("--name", default="", help="a label to tell keys apart")
    create.set_defaults(run=_run, action=_create)
    listing = keys_sub.add_parser("list", help="every key, revoked ones too (never a secret)")
    listing.add_argument("--tenant", help="only this tenant's keys")
    listing.set_defaults(run=_run, action=_list)
    revoke = keys_sub.add_parser("revoke", help="refuse a key from now on")
    revoke.add_argument("key_id", help="the key's id (the 16 hex digits after tulip_)")
    revoke.set_defaults(run=_run, action=_revoke)


def _run(args: argparse.Namespace) -> int:
    from tulip_ops.dev.embedded import run_async

    url = OpsSettings.from_env().admin_url("tulip-memory keys")
    try:
        lines: list[str] = run_async(_as_operator(url, args, args.action))
    except (LookupError, PermissionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


async def _as_operator(
    url: str, args: argparse.Namespace, action: Callable[[Any, argparse.Namespace], Awaitable[Any]]
) -> list[str]:
    from tulip_memory.store.postgres.admin import as_operator
    from tulip_memory.store.postgres.connect import connect

    conn = await connect(url, "TULIP_DATABASE_ADMIN_URL")
    try:
        await as_operator(conn)
        await keys.ApiKeys().ensure(conn)
        result: list[str] = await action(conn, args)
        return result
    finally:
        await conn.close()


async def _create(conn: Any, args: argparse.Namespace) -> list[str]:
    text, info = await keys.mint(conn, args.tenant, args.scope, args.name)
    print(
        f"created key {info.key_id} of tenant {info.tenant} (scope {info.scope}); it is "
        "shown once, here: store it now",
        file=sys.stderr,
    )
    return [text]


async def _list(conn: Any, args: argparse.Namespace) -> list[str]:
    return [k.describe() for k in await keys.listed(conn, args.tenant)] or ["no API keys"]


async def _revoke(conn: Any, args: argparse.Namespace) -> list[str]:
    info = await keys.revoke(conn, args.key_id)
    return [f"revoked {info.key_id} of tenant {info.tenant}"]

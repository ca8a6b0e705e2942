"""Stores of the application role whose tables the suite migrates as the owner.

The application role never migrates (it owns nothing); a test's fresh table is
migrated at first use through the session's administrator DSN (``migrator=``),
exactly as ``tulip-memory provision`` migrates a deployment's table.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from tests.support.services import STARTED
from tulip_memory.store import PgMemory


def app_store(dsn: str, **kwargs: Any) -> PgMemory:
    """``PgMemory(dsn, **kwargs)`` whose table is migrated first, as the owner."""
    assert STARTED, "the postgres fixture starts the server first"
    kwargs.setdefault("migrator", STARTED[-1].admin_dsn)
    return PgMemory(dsn, **kwargs)


async def dead_reason(admin_dsn: str, event_id: str, *, tenant: str | None = None) -> str:
    """The full reason of a dead letter (the ledger and status hold a redacted one);
    ``tenant`` names it when tenants hold letters of the same id."""
    return str(await _dead_field(admin_dsn, event_id, "reason", tenant=tenant))


async def dead_raw(admin_dsn: str, event_id: str, *, tenant: str | None = None) -> bytes | None:
    """The body a dead letter kept, as the bytes that arrived (None: a minimal letter)."""
    raw = await _dead_field(admin_dsn, event_id, "raw", tenant=tenant, allow_null=True)
    return None if raw is None else bytes(raw)


async def _dead_field(
    admin_dsn: str, event_id: str, column: str, *, tenant: str | None, allow_null: bool = False
) -> Any:
    conn = await asyncpg.connect(admin_dsn)
    try:
        rows = await conn.fetch(
            f"SELECT {column} FROM public.tulip_dead_letters "
            "WHERE event_id = $1 AND (tenant = $2 OR $2 IS NULL)",
            event_id,
            tenant,
        )
    finally:
        await conn.close()
    assert rows, f"no dead letter {event_id}"
    assert len(rows) == 1, f"{len(rows)} tenants hold a dead letter {event_id}: name one"
    assert allow_null or rows[0][0] is not None, f"dead letter {event_id} has no {column}"
    return rows[0][0]

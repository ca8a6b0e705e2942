"""Stores of the application role whose tables the suite migrates as the owner.

The application role never migrates (it owns nothing); a test's fresh table is
migrated at first use through the session's administrator DSN (``migrator=``),
exactly as ``tulip-memory provision`` migrates a deployment's table.
"""

from __future__ import annotations

from typing import Any

from tests.support.services import STARTED
from tulip_memory.store import PgMemory


def app_store(dsn: str, **kwargs: Any) -> PgMemory:
    """``PgMemory(dsn, **kwargs)`` whose table is migrated first, as the owner."""
    assert STARTED, "the postgres fixture starts the server first"
    kwargs.setdefault("migrator", STARTED[-1].admin_dsn)
    return PgMemory(dsn, **kwargs)

"""Provision the application role ``PgMemory`` connects as.

Run once with an administrator DSN: installs pgvector, creates a LOGIN role that is
neither superuser nor BYPASSRLS, and lets it create its tables in one schema. The
returned DSN is the one to give the store (``TULIP_DATABASE_URL``).
"""

from __future__ import annotations

import re
from urllib.parse import quote, urlsplit, urlunsplit

_ROLE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


async def provision_app_role(
    admin_dsn: str,
    role: str = "tulip_app",
    *,
    password: str | None = None,
    schema: str = "public",
) -> str:
    """Create (or update) ``role`` and return a DSN that logs in as it."""
    import asyncpg

    for what, ident in (("role", role), ("schema", schema)):
        if not _ROLE.match(ident):
            raise ValueError(f"{what} {ident!r} is not a valid lower-case identifier")
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        exists = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role)
        verb = "ALTER" if exists else "CREATE"
        await conn.execute(f"{verb} ROLE {role} LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEROLE")
        if password is not None:
            # Parameters cannot bind in utility statements; quote_literal does it safely.
            lit = await conn.fetchval("SELECT quote_literal($1)", password)
            await conn.execute(f"ALTER ROLE {role} PASSWORD {lit}")
        db = await conn.fetchval("SELECT current_database()")
        await conn.execute(f'GRANT CONNECT ON DATABASE "{db}" TO {role}')
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        await conn.execute(f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {role}")
    finally:
        await conn.close()
    return dsn_for_role(admin_dsn, role, password)


def dsn_for_role(dsn: str, role: str, password: str | None = None) -> str:
    """``dsn`` with its user (and password) replaced."""
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    cred = quote(role, safe="") + (":" + quote(password, safe="") if password else "")
    return urlunsplit(parts._replace(netloc=f"{cred}@{host}"))

"""The roles of a deployment, provisioned once through an administrator DSN.

- ``tulip_owner`` (NOLOGIN) owns every table, sequence and index of the project; the
  migrations and the reindex DDL run as it. Nobody logs in as the owner: the
  administrator, or a migrator role that is a member (``GRANT tulip_owner TO
  my_migrator``), ``SET ROLE``s to it (:func:`as_owner`).
- ``tulip_dml`` (NOLOGIN) is what the migrations grant privileges to: DML on the tables
  the pipeline writes, ``SELECT`` on the registries (vector slots, layouts). The
  application role (LOGIN, default ``tulip_app``) is a member and gets nothing else:
  no ``CREATE`` on the schema, no ownership, so it cannot alter, drop or add triggers,
  rules or policies to any table.
- ``tulip_ops`` (LOGIN, ``BYPASSRLS``, never superuser, ``NOINHERIT``) is what the
  admin tools (``dlq``, all-tenant ``reindex``) run as (:func:`as_operator`): it reads
  every tenant, and is a member of the owner for reindex DDL only through ``SET ROLE``.

Role names are cluster-wide in Postgres; ``tulip_owner``, ``tulip_dml`` and
``tulip_ops`` are fixed because the migrations name them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from tulip_memory.errors import TenantIsolationError
from tulip_memory.store.postgres.roles import DML as DML
from tulip_memory.store.postgres.roles import OPS as OPS
from tulip_memory.store.postgres.roles import OWNER as OWNER

log = logging.getLogger(__name__)

_ROLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# Relations of the schema the application role owns (deployments provisioned before
# the owner role existed): their ownership moves to the owner.
_OWNED_RELATIONS = """
SELECT c.relkind::text AS relkind, format('%I.%I', n.nspname, c.relname) AS name
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relowner = $1::regrole AND n.nspname = $2 AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
  AND NOT (c.relkind = 'S' AND EXISTS (
      SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i')))
ORDER BY c.relkind <> 'S', name"""
# What the application role still owns after the transfer: functions, types, other
# schemas' relations. None of it is ours; it may be an attacker's.
_STILL_OWNED = """
SELECT 'function ' || p.oid::regprocedure::text FROM pg_proc p WHERE p.proowner = $1::regrole
UNION ALL
SELECT 'relation ' || c.oid::regclass::text FROM pg_class c
WHERE c.relowner = $1::regrole AND c.relkind NOT IN ('i', 'I', 't')
UNION ALL
SELECT 'schema ' || quote_ident(nspname) FROM pg_namespace WHERE nspowner = $1::regrole
UNION ALL
SELECT 'type ' || t.oid::regtype::text FROM pg_type t
WHERE t.typowner = $1::regrole AND t.typrelid = 0 AND t.typelem = 0
ORDER BY 1"""
_ROLE_FLAGS = "SELECT rolname, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
_IS_MEMBER = "SELECT pg_has_role(current_user, oid, 'MEMBER') FROM pg_roles WHERE rolname = $1"
_DIRECT_MEMBER = """
SELECT 1 FROM pg_auth_members WHERE roleid = $1::regrole AND member = $2::regrole"""
_KIND = {"r": "TABLE", "p": "TABLE", "v": "VIEW", "m": "MATERIALIZED VIEW", "S": "SEQUENCE"}


class ProvisionError(TenantIsolationError):
    """Provisioning found something it will not sign off (what, and what to do)."""


async def provision_app_role(
    admin_dsn: str,
    role: str = "tulip_app",
    *,
    password: str | None = None,
    schema: str = "public",
    ops_password: str | None = None,
) -> str:
    """Create (or bring back in line) the owner, DML, operator and application roles;
    move the project's relations the application role owns to the owner; migrate the
    event ledger as the owner. Returns a DSN that logs in as ``role``.

    Raises :class:`ProvisionError` when the application role still owns anything
    after the transfer (a function, a type, another schema): review and drop it."""
    from tulip_memory.store.postgres.connect import connect

    for what, ident in (("role", role), ("schema", schema)):
        if not _ROLE.fullmatch(ident) or ident in (OWNER, DML, OPS):
            raise ValueError(f"{what} {ident!r} is not a valid lower-case identifier")
    conn = await connect(admin_dsn)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        await _roles(conn, role, password, ops_password)
        await _schema(conn, role, schema)
        await _transfer(conn, role, schema)
    finally:
        await conn.close()
    from tulip_memory.erasures import Erasures
    from tulip_memory.ledger import EventLedger
    from tulip_memory.retention import Retention

    async with as_owner(admin_dsn) as owner:
        await EventLedger().migrate(owner)
        await Erasures().migrate(owner)
        await Retention().migrate(owner)
    return dsn_for_role(admin_dsn, role, password)


async def _ensure_role(conn: Any, role: str, attributes: str, password: str | None) -> None:
    exists = await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role)
    await conn.execute(f"{'ALTER' if exists else 'CREATE'} ROLE {role} {attributes}")
    if password is not None:
        # Parameters cannot bind in utility statements; quote_literal does it safely.
        lit = await conn.fetchval("SELECT quote_literal($1)", password)
        await conn.execute(f"ALTER ROLE {role} PASSWORD {lit}")


async def _roles(conn: Any, role: str, password: str | None, ops_password: str | None) -> None:
    plain = "NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION"
    await _ensure_role(conn, OWNER, f"NOLOGIN {plain} NOBYPASSRLS NOINHERIT", None)
    await _ensure_role(conn, DML, f"NOLOGIN {plain} NOBYPASSRLS NOINHERIT", None)
    await _ensure_role(conn, OPS, f"LOGIN {plain} BYPASSRLS NOINHERIT", ops_password)
    await _ensure_role(conn, role, f"LOGIN {plain} NOBYPASSRLS INHERIT", password)
    # The application role is a member of the DML role and of nothing else of ours.
    for other in (OWNER, OPS):
        if await conn.fetchval(_DIRECT_MEMBER, other, role):
            await conn.execute(f"REVOKE {other} FROM {role}")
    await conn.execute(f"GRANT {DML} TO {role}")
    await conn.execute(f"GRANT {OWNER} TO {OPS}")
    db = await conn.fetchval("SELECT quote_ident(current_database())")
    await conn.execute(f"GRANT CONNECT ON DATABASE {db} TO {role}, {OPS}")


async def _schema(conn: Any, role: str, schema: str) -> None:
    await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema} AUTHORIZATION {OWNER}")
    await conn.execute(f"GRANT USAGE, CREATE ON SCHEMA {schema} TO {OWNER}")
    await conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {DML}, {OPS}, {role}")
    await conn.execute(f"REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC, {DML}, {OPS}, {role}")


async def _transfer(conn: Any, role: str, schema: str) -> None:
    """Existing deployments migrate in place: the project's relations the application
    role created on first use move to the owner (indexes and owned sequences follow
    their table); anything else it owns stops provisioning."""
    for r in await conn.fetch(_OWNED_RELATIONS, role, schema):
        await conn.execute(f"ALTER {_KIND[r['relkind']]} {r['name']} OWNER TO {OWNER}")
    left = [r[0] for r in await conn.fetch(_STILL_OWNED, role)]
    if left:
        raise ProvisionError(
            f"role {role} still owns {', '.join(left)}: nothing of tulip-memory is owned "
            "by the application role, so this may be an attacker's; review, drop it, "
            "and run provisioning again"
        )


@asynccontextmanager
async def as_owner(dsn: str) -> AsyncIterator[Any]:
    """A connection through ``dsn`` acting as the owner role (``SET ROLE``): for
    migrations and reindex DDL. ``dsn``'s role must be a superuser or a member."""
    from tulip_memory.store.postgres.connect import connect

    conn = await connect(dsn)
    try:
        member = await conn.fetchval(_IS_MEMBER, OWNER)
        if not member:
            who = (await conn.fetchrow(_ROLE_FLAGS))["rolname"]
            missing = member is None
            raise PermissionError(
                f"role {who!r} cannot act as {OWNER}, which owns the tables and runs "
                "migrations and reindex DDL: "
                + (
                    "the role does not exist yet; run `tulip-memory provision` with the "
                    "administrator DSN (TULIP_DATABASE_ADMIN_URL)"
                    if missing
                    else f"use the administrator DSN, or `GRANT {OWNER} TO {who}`"
                )
            )
        await conn.execute(f"SET ROLE {OWNER}")
        yield conn
    finally:
        await conn.close()


async def as_operator(conn: Any) -> str:
    """Make ``conn`` act as a non-superuser role that reads every tenant: a superuser
    ``SET ROLE``s to ``tulip_ops`` (statements, and anything they fire, never run with
    superuser rights); a BYPASSRLS role stays itself. Returns the acting role."""
    row = await conn.fetchrow(_ROLE_FLAGS)
    if row["rolsuper"]:
        if await conn.fetchval(_IS_MEMBER, OPS) is None:
            raise PermissionError(
                f"role {OPS} does not exist: run `tulip-memory provision` with the "
                "administrator DSN first"
            )
        await conn.execute(f"SET ROLE {OPS}")
        return OPS
    if not row["rolbypassrls"]:
        raise PermissionError(
            f"role {row['rolname']!r} is subject to row-level security, so it sees one "
            f"tenant at most: use {OPS} (or the administrator DSN)"
        )
    return str(row["rolname"])


def dsn_for_role(dsn: str, role: str, password: str | None = None) -> str:
    """``dsn`` with its user (and password) replaced."""
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    cred = quote(role, safe="") + (":" + quote(password, safe="") if password else "")
    return urlunsplit(parts._replace(netloc=f"{cred}@{host}"))

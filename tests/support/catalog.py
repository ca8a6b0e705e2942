"""What the migrations leave in a database, read from the catalog, for snapshot tests.

:func:`fresh_database` makes an empty database on the session's server (dropped at
the end); :func:`catalog` reads, for the relations of one table family (a bare name
and the names that start with ``<name>_``), everything a migration decides: tables,
sequences and indexes with their owners and grants, columns with types, defaults
and column grants, constraints, row-level security and policies, triggers, and the
functions named like the family, plus the versions ``<name>_migrations`` records.
Timestamps and OIDs are left out, so two migrations of the same code compare equal.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

_RELATIONS = """
SELECT c.oid, c.relname, c.relkind::text AS kind, c.relowner::regrole::text AS owner,
       coalesce((SELECT array_agg(a::text ORDER BY a::text) FROM unnest(c.relacl) a),
                '{}') AS grants,
       c.relrowsecurity AS rls, c.relforcerowsecurity AS forced_rls
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND (c.relname = $2 OR starts_with(c.relname, $2 || '_'))
  AND c.relkind IN ('r', 'p', 'S', 'v', 'm')
ORDER BY c.relname"""
_COLUMNS = """
SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type,
       a.attnotnull AS not_null, pg_get_expr(d.adbin, d.adrelid) AS default,
       a.attgenerated::text AS generated, a.attidentity::text AS identity,
       coalesce((SELECT array_agg(x::text ORDER BY x::text) FROM unnest(a.attacl) x),
                '{}') AS grants
FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attname"""
_INDEXES = """
SELECT c.relname AS name, c.relowner::regrole::text AS owner,
       pg_get_indexdef(i.indexrelid) AS definition
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1 ORDER BY c.relname"""
_CONSTRAINTS = """
SELECT conname AS name, contype::text AS type, pg_get_constraintdef(oid) AS definition
FROM pg_constraint WHERE conrelid = $1 ORDER BY conname"""
_POLICIES = """
SELECT policyname AS name, permissive, roles::text[] AS roles, cmd, qual, with_check
FROM pg_policies WHERE schemaname = $1 AND tablename = $2 ORDER BY policyname"""
_TRIGGERS = """
SELECT tgname AS name, pg_get_triggerdef(oid) AS definition
FROM pg_trigger WHERE tgrelid = $1 AND NOT tgisinternal ORDER BY tgname"""
_FUNCTIONS = """
SELECT p.oid::regprocedure::text AS name, p.proowner::regrole::text AS owner,
       coalesce((SELECT array_agg(a::text ORDER BY a::text) FROM unnest(p.proacl) a),
                '{}') AS grants,
       pg_get_functiondef(p.oid) AS definition
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = $1 AND starts_with(p.proname, $2 || '_')
ORDER BY 1"""
_VERSIONS = "SELECT version, name FROM {table}_migrations ORDER BY version"


def database_dsn(dsn: str, database: str) -> str:
    """``dsn`` naming another database of the same server."""
    return urlunsplit(urlsplit(dsn)._replace(path="/" + database))


@asynccontextmanager
async def fresh_database(admin_dsn: str) -> AsyncIterator[str]:
    """The administrator DSN of a new, empty database of ``admin_dsn``'s server,
    dropped (with whatever connected to it) on the way out."""
    name = f"tulip_catalog_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f"CREATE DATABASE {name}")
        try:
            yield database_dsn(admin_dsn, name)
        finally:
            await conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
    finally:
        await conn.close()


async def catalog(conn: Any, table: str) -> dict[str, Any]:
    """Everything the catalog holds of ``table``'s family (``schema.name``), as JSON data."""
    schema, _, name = table.rpartition(".")
    out: dict[str, Any] = {"relations": {}, "functions": []}
    for rel in await conn.fetch(_RELATIONS, schema, name):
        entry: dict[str, Any] = {
            k: rel[k] for k in ("kind", "owner", "grants", "rls", "forced_rls")
        }
        if rel["kind"] in ("r", "p"):
            oid = rel["oid"]
            entry["columns"] = [_column(r) for r in await conn.fetch(_COLUMNS, oid)]
            entry["indexes"] = [
                f"{r['definition']} OWNER {r['owner']}" for r in await conn.fetch(_INDEXES, oid)
            ]
            entry["constraints"] = [
                f"{r['name']} ({r['type']}) {r['definition']}"
                for r in await conn.fetch(_CONSTRAINTS, oid)
            ]
            entry["policies"] = [
                dict(r) for r in await conn.fetch(_POLICIES, schema, rel["relname"])
            ]
            entry["triggers"] = [r["definition"] for r in await conn.fetch(_TRIGGERS, oid)]
        out["relations"][rel["relname"]] = entry
    for fn in await conn.fetch(_FUNCTIONS, schema, name):
        out["functions"].append({**dict(fn), "definition": fn["definition"].splitlines()})
    versions = await conn.fetch(_VERSIONS.format(table=table))
    out["migrations"] = [f"{r['version']} {r['name']}" for r in versions]
    return out


def _column(r: Any) -> str:
    """One column on one line: ``name type NOT NULL DEFAULT ... GRANTS [...]``."""
    out = f"{r['name']} {r['type']}" + (" NOT NULL" if r["not_null"] else "")
    if r["default"] is not None:
        out += f" DEFAULT {r['default']}"
    if r["generated"]:
        out += f" GENERATED({r['generated']})"
    if r["identity"]:
        out += f" IDENTITY({r['identity']})"
    if r["grants"]:
        out += f" GRANTS {r['grants']}"
    return out


def dump(data: dict[str, Any]) -> str:
    """The snapshot file's text: stable order, a column, index or constraint a line."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None

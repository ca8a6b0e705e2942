"""A ``PgMemory`` table's schema: migrated by the owner role, verified by the store."""

from __future__ import annotations

from typing import Any

from tulip_memory.store.postgres import sql
from tulip_memory.store.postgres.migrations import MEMORIES, names
from tulip_memory.store.postgres.render import render


async def migrate_schema(
    conn: Any,
    *,
    table: str,
    name: str,
    dim: int,
    ann: bool,
    text_search_config: str,
    model: str,
    spec: tuple[str, str | None] | None = None,
) -> list[int]:
    """Bring a memories table up to date on ``conn``, a connection acting as the owner
    role (:func:`~tulip_memory.store.postgres.admin.as_owner`); return the versions
    applied now. ``model`` names the vectors of the original ``embedding`` column when
    the table's slot registry is created (the store's own encoder), and ``spec`` how
    to build it (its model string and API base) when a model string can."""
    await _ensure_vector(conn)
    await _check_text_search_config(conn, text_search_config)
    placeholders = names(name=name, dim=dim, tsconfig=text_search_config)
    applied = await MEMORIES.migrate(conn, table, placeholders, ann=ann)
    spec_text, api_base = spec if spec is not None else (None, None)
    await conn.execute(render(sql.SEED_SLOT, t=table), model, dim, spec_text, api_base)
    return applied


async def verify_schema(conn: Any, *, table: str, dim: int, text_search_config: str) -> None:
    """Refuse a memories table that is not at this code's schema version, or whose
    width or text search configuration is not this store's. The application role
    never migrates: it cannot (it owns nothing and has no CREATE on the schema)."""
    await _check_text_search_config(conn, text_search_config)
    await MEMORIES.verify(conn, table)
    await _check_width(conn, table, dim)
    await _check_table_text_search_config(conn, table, text_search_config)


async def _ensure_vector(conn: Any) -> None:
    import asyncpg

    if await conn.fetchval(sql.HAS_VECTOR):
        return
    try:
        await conn.execute(sql.CREATE_VECTOR)
    except asyncpg.PostgresError as e:
        raise PermissionError(
            "the pgvector extension is not installed in this database and this role "
            f"cannot install it ({e}). Run `CREATE EXTENSION vector` as a superuser, "
            "or use tulip_memory.store.postgres.provision_app_role."
        ) from e


async def _check_text_search_config(conn: Any, config: str) -> None:
    import asyncpg

    try:
        await conn.fetchval(sql.TEXT_SEARCH_CONFIG, config)
    except asyncpg.PostgresError as e:
        raise ValueError(
            f"text_search_config {config!r} is not a text search configuration of this "
            f"database ({e}). Use 'english', 'simple' or another one listed by "
            "SELECT cfgname FROM pg_ts_config, or create it first."
        ) from e


async def _check_table_text_search_config(conn: Any, table: str, config: str) -> None:
    row = await conn.fetchrow(sql.TABLE_TEXT_SEARCH_CONFIG, table, config)
    if row is not None and not row["same"]:
        raise ValueError(
            f"{table} indexes text with text search configuration {row['config']!r} but "
            f"this store was given {config!r}: their lexemes would not match. Pass "
            f"text_search_config={row['config']!r}, or use another table."
        )


async def _check_width(conn: Any, table: str, dim: int) -> None:
    """The original column must fit this store's encoder while recall reads it and
    only a store's own encoder can fill it; a slot with a recorded model string (or
    one a reindex moved recall to) is filled and queried with its own model."""
    if await conn.fetchval(render(sql.READS_ORIGINAL, t=table)) is not True:
        return
    width = await conn.fetchval(sql.VECTOR_WIDTH, table)
    if width is not None and width != dim:
        raise ValueError(
            f"{table}.embedding is vector({width}) but this store encodes {dim}-wide "
            "vectors (a different embedder or dim). Use another table, or reindex "
            "the table to the new model."
        )

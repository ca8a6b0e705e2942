"""The one migration registry: each table family is a :class:`Family` of numbered
:class:`Migration` templates, recorded in ``<table>_migrations``.

A family is a table and its companions (the memories table with its turns, slots,
layouts, reindex jobs and ranges and namespace counters; the event ledger; the dead
letters), migrated together. Its statements are templates of
:func:`~tulip_memory.store.postgres.render.render` over ``{t}`` (the qualified table),
``{p}`` (its bare name, for index, policy and trigger names) and whatever else the
family names (the memories' ``{dim}`` and ``{tsconfig}``). Migrations run once each,
in order, as the owner role, inside one transaction holding an advisory lock on the
table name, so concurrent migrators apply them once; the application role only
verifies that its table is at the newest version. ``tests/store/test_catalog.py``
compares what each family leaves in an empty database to a checked-in snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from tulip_memory.errors import SchemaError
from tulip_memory.store.postgres import sql
from tulip_memory.store.postgres.audit import Expected, expected_objects
from tulip_memory.store.postgres.render import render

#: ``(version, name, statements)`` of one migration, rendered for one table.
Step = tuple[int, str, list[str]]
_NONE: Mapping[str, object] = MappingProxyType({})


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
    #: Skipped (recorded, no statement run) for a table that cannot have an ANN index.
    needs_ann: bool = False


@dataclass(frozen=True)
class Family:
    """The migrations of one table family, versions 1, 2, ... in order."""

    name: str
    migrations: tuple[Migration, ...]

    def __post_init__(self) -> None:
        if self.versions != list(range(1, len(self.migrations) + 1)):
            raise ValueError(f"{self.name}: migration versions {self.versions} are not 1..n")

    @property
    def versions(self) -> list[int]:
        return [m.version for m in self.migrations]

    def steps(
        self, names: Mapping[str, object], *, upto: int | None = None, ann: bool = True
    ) -> list[Step]:
        """The migrations up to ``upto`` (default all), rendered with ``names``; a
        migration that needs an ANN index has no statements when ``ann`` is false."""
        return [
            (
                m.version,
                m.name,
                [render(s, **names) for s in m.statements if ann or not m.needs_ann],
            )
            for m in self.migrations
            if upto is None or m.version <= upto
        ]

    async def migrate(
        self, conn: Any, table: str, names: Mapping[str, object] = _NONE, *, ann: bool = True
    ) -> list[int]:
        """Apply what ``table`` lacks (``conn`` acts as the owner role), ``{t}``
        rendered as ``table``; the versions applied now."""
        return await apply_migrations(conn, table, self.steps({**names, "t": table}, ann=ann))

    async def verify(self, conn: Any, table: str) -> None:
        """Raise :class:`SchemaError` unless ``table`` is at this code's newest version."""
        await verify_migrations(conn, table, self.versions)

    def expected(self, table: str, names: Mapping[str, object] = _NONE) -> dict[str, Expected]:
        """What the migrations leave on ``table`` and its companions (for
        :func:`~tulip_memory.store.postgres.audit.audit`)."""
        rendered = self.steps({**names, "t": table})
        return expected_objects(table, [s for _, _, statements in rendered for s in statements])


class FixedTable:
    """A family migrated on one fixed table (the event ledger, the dead letters): the
    migrate / expected / ensure of the class holding its statements."""

    family: ClassVar[Family]
    table: ClassVar[str]
    names: ClassVar[Mapping[str, object]] = _NONE

    async def migrate(self, conn: Any) -> None:
        """Create or update the table; ``conn`` acts as the owner role."""
        await self.family.migrate(conn, self.table, self.names)

    def expected(self) -> dict[str, Expected]:
        """What the migrations leave on the table (for the admin tools' audit)."""
        return self.family.expected(self.table, self.names)

    async def ensure(self, conn: Any) -> None:
        """Refuse a table that provisioning has not brought to this code's version."""
        await self.family.verify(conn, self.table)


def tenant_rls(t: str = "{t}", p: str = "{p}") -> tuple[str, str, str]:
    """Forced row-level security on ``t`` and its one policy ``<p>_tenant``: a
    connection sees and writes only the rows of the tenant it is pinned to
    (``tulip.tenant``)."""
    return (
        f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE {t} FORCE ROW LEVEL SECURITY",
        f"""CREATE POLICY {p}_tenant ON {t}
            USING (tenant = current_setting('tulip.tenant', true))
            WITH CHECK (tenant = current_setting('tulip.tenant', true))""",
    )


async def verify_migrations(conn: Any, table: str, versions: list[int]) -> None:
    """Raise :class:`SchemaError` unless ``<table>_migrations`` records ``versions``."""
    import asyncpg

    done: set[int] = set()
    try:
        if await conn.fetchval(sql.RELATION_EXISTS, f"{table}_migrations"):
            done = {r["version"] for r in await conn.fetch(render(sql.APPLIED_VERSIONS, t=table))}
    except asyncpg.InsufficientPrivilegeError:
        pass  # provisioned before the grants migration: the same answer
    missing = sorted(set(versions) - done)
    if missing:
        state = f"lacks migrations {missing}" if done else "does not exist yet"
        raise SchemaError(
            f"{table} {state}: migrations run as the owner role, never as the "
            "application role. Run `tulip-memory provision` with "
            "TULIP_DATABASE_ADMIN_URL (or build the store with migrator=<admin DSN>)"
        )


async def apply_migrations(conn: Any, table: str, steps: list[Step]) -> list[int]:
    """Apply the steps ``<table>_migrations`` has not recorded, in order, in one
    transaction under an advisory lock on the table name (concurrent migrators
    migrate once). ``conn`` acts as the owner role."""
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute(sql.MIGRATION_LOCK, table)
        await conn.execute(render(sql.CREATE_VERSION_TABLE, t=table))
        done = {r["version"] for r in await conn.fetch(render(sql.APPLIED_VERSIONS, t=table))}
        for version, label, statements in steps:
            if version in done:
                continue
            for stmt in statements:
                await conn.execute(stmt)
            await conn.execute(render(sql.RECORD_VERSION, t=table), version, label)
            applied_now.append(version)
    return applied_now

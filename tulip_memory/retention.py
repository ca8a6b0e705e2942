"""Retention policies: per tenant, how long each kind of data is kept (defaults off).

One row per tenant in ``tulip_retention``: turns older than ``turns_days``, memories
not observed (nor updated) in ``memories_days``, threads whose newest checkpoint is
older than ``threads_days`` and dead letters older than ``dead_letters_days`` are
removed by ``tulip-memory retention run``; a ``NULL`` keeps that kind forever. Rows are
the tenant's under forced row-level security; the operators' role sets and lists
them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from tulip_memory.store.postgres.family import Family, FixedTable, Migration, tenant_rls

TABLE = "public.tulip_retention"
KINDS = ("turns_days", "memories_days", "threads_days", "dead_letters_days")

RETENTION = Family(
    "retention policies",
    (
        Migration(
            1,
            "retention policies per tenant",
            (
                """CREATE TABLE {t} (
                    tenant text PRIMARY KEY,
                    turns_days integer CHECK (turns_days > 0),
                    memories_days integer CHECK (memories_days > 0),
                    threads_days integer CHECK (threads_days > 0),
                    dead_letters_days integer CHECK (dead_letters_days > 0),
                    updated_at timestamptz NOT NULL DEFAULT now()
                )""",
                *tenant_rls(),
                "GRANT SELECT ON {t} TO tulip_dml",
                "GRANT SELECT ON {t}_migrations TO tulip_dml, tulip_ops",
                "GRANT SELECT, INSERT, UPDATE, DELETE ON {t} TO tulip_ops",
            ),
        ),
    ),
)
_NAMES = {"p": TABLE.rpartition(".")[2]}
_SET = f"""
INSERT INTO {TABLE} AS r (tenant, turns_days, memories_days, threads_days, dead_letters_days)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant) DO UPDATE SET turns_days = EXCLUDED.turns_days,
    memories_days = EXCLUDED.memories_days, threads_days = EXCLUDED.threads_days,
    dead_letters_days = EXCLUDED.dead_letters_days, updated_at = now()"""
_ALL = f"SELECT * FROM {TABLE} ORDER BY tenant"
_GET = f"SELECT * FROM {TABLE} WHERE tenant = $1"


@dataclass(frozen=True)
class Policy:
    """A tenant's retention, in days per kind (``None``: kept)."""

    tenant: str
    turns_days: int | None = None
    memories_days: int | None = None
    threads_days: int | None = None
    dead_letters_days: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self)[1:]:
            value = getattr(self, f.name)
            if value is not None and (isinstance(value, bool) or value < 1):
                raise ValueError(f"{f.name} must be a number of days >= 1, or unset")

    @property
    def off(self) -> bool:
        return all(getattr(self, k) is None for k in KINDS)

    @classmethod
    def from_row(cls, r: Any) -> Policy:
        return cls(r["tenant"], *(r[k] for k in KINDS))


class Retention(FixedTable):
    """Policy statements; ``conn`` acts as ``tulip_ops`` (every tenant) or is pinned to
    the policy's tenant."""

    family, table, names = RETENTION, TABLE, _NAMES

    async def put(self, conn: Any, policy: Policy) -> None:
        await conn.execute(_SET, policy.tenant, *(getattr(policy, k) for k in KINDS))

    async def all(self, conn: Any) -> list[Policy]:
        return [Policy.from_row(r) for r in await conn.fetch(_ALL)]

    async def get(self, conn: Any, tenant: str) -> Policy | None:
        row = await conn.fetchrow(_GET, tenant)
        return None if row is None else Policy.from_row(row)

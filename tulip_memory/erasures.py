"""Erasure tombstones: one row per erase event of a tenant, the fence every later write
of that tenant checks, and the erase's receipt.

A row holds the erase's scope, a SHA-256 of its subject's ordering key (never the key:
a namespace names a user), its ``cutoff`` (the erase's publish time), its state
(``erasing`` until every store is done, then ``done``) and per-store counts, no
content. Rows are the tenant's, under forced row-level security like the ledger.

The fence: every write of an event takes ``tulip-erase/<tenant>`` shared (its own
statement, so the statement after it sees every tombstone committed before the lock
was granted) and asks :meth:`Erasures.fence`; an erase inserts its tombstone holding
the lock exclusively, so it waits for the writes in flight and every write after it
sees the tombstone. Rows an event committed before the tombstone are deleted by the
erase; an event of the subject stamped at or before the cutoff that comes after is
dropped. ``erasing`` tenant-wide erases hold back the tenant's later events until done.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tulip_memory.store.postgres.family import Family, FixedTable, Migration, tenant_rls

TABLE = "public.tulip_erasures"
ERASING, DONE = "erasing", "done"
TENANT_SCOPE = "tenant"

ERASURES = Family(
    "erasures",
    (
        Migration(
            1,
            "erasure tombstones and receipts",
            (
                """CREATE TABLE {t} (
                    tenant text NOT NULL,
                    event_id text NOT NULL,
                    scope text NOT NULL
                        CHECK (scope IN ('namespace', 'messages', 'thread', 'tenant')),
                    subject text NOT NULL,
                    cutoff double precision NOT NULL,
                    state text NOT NULL CHECK (state IN ('erasing', 'done')),
                    counts jsonb NOT NULL DEFAULT '{}'::jsonb,
                    started_at timestamptz NOT NULL DEFAULT now(),
                    finished_at timestamptz,
                    PRIMARY KEY (tenant, event_id)
                )""",
                "CREATE INDEX {p}_subject ON {t} (tenant, subject)",
                *tenant_rls(),
                "GRANT SELECT, INSERT, UPDATE ON {t} TO tulip_dml",
                "GRANT SELECT ON {t}_migrations TO tulip_dml, tulip_ops",
                "GRANT SELECT ON {t} TO tulip_ops",
            ),
        ),
    ),
)
_NAMES = {"p": TABLE.rpartition(".")[2]}

LOCK_SHARED = "SELECT pg_advisory_xact_lock_shared(hashtext('tulip-erase/' || $1))"
LOCK = "SELECT pg_advisory_xact_lock(hashtext('tulip-erase/' || $1))"
_FENCE = f"""
SELECT max(cutoff) FILTER (WHERE scope = 'tenant' OR subject = ANY($2::text[])) AS cutoff,
       bool_or(state = 'erasing' AND scope = 'tenant') AS busy
FROM {TABLE} WHERE tenant = $1 AND (scope = 'tenant' OR subject = ANY($2::text[]))"""
_BEGIN = f"""
INSERT INTO {TABLE} (tenant, event_id, scope, subject, cutoff, state)
VALUES ($1, $2, $3, $4, $5, 'erasing') ON CONFLICT (tenant, event_id) DO NOTHING"""
_ADD = f"""
UPDATE {TABLE} SET counts = (
    SELECT jsonb_object_agg(k, n) FROM (
        SELECT k, sum(v::bigint) AS n FROM (
            SELECT * FROM jsonb_each_text(counts) UNION ALL SELECT * FROM jsonb_each_text($3::jsonb)
        ) AS u(k, v) GROUP BY k
    ) AS g)
WHERE tenant = $1 AND event_id = $2"""
_FINISH = f"""
UPDATE {TABLE} SET state = 'done', finished_at = now()
WHERE tenant = $1 AND event_id = $2 AND state = 'erasing'"""
_GET = f"SELECT * FROM {TABLE} WHERE tenant = $1 AND event_id = $2"


@dataclass(frozen=True)
class Fence:
    """What the tenant's tombstones say of one event: ``cutoff``, the latest erase time
    of its subject (events stamped at or before it are dropped); ``busy``, a tenant
    erase is still under way (later events wait for it)."""

    cutoff: float | None
    busy: bool

    def drops(self, ts: float) -> bool:
        return self.cutoff is not None and ts <= self.cutoff


@dataclass(frozen=True)
class Receipt:
    """An erase's record: per-store counts and times, no content."""

    event_id: str
    scope: str
    state: str
    counts: Mapping[str, int]
    started_at: datetime
    finished_at: datetime | None


class Erasures(FixedTable):
    """Tombstone statements; each takes the connection of the caller's transaction,
    pinned to ``tenant``."""

    family, table, names = ERASURES, TABLE, _NAMES

    async def fence(self, conn: Any, tenant: str, subjects: Sequence[str]) -> Fence:
        """Take the tenant's erase lock shared (until the transaction ends), then read
        the tombstones matching ``subjects`` (digests) or the whole tenant."""
        await conn.execute(LOCK_SHARED, tenant)
        row = await conn.fetchrow(_FENCE, tenant, list(subjects))
        cutoff = None if row is None or row["cutoff"] is None else float(row["cutoff"])
        return Fence(cutoff, bool(row is not None and row["busy"]))

    async def begin(
        self, conn: Any, *, tenant: str, event_id: str, scope: str, subject: str, cutoff: float
    ) -> None:
        """Record the erase (once), holding the tenant's erase lock exclusively: the
        tenant's writes in flight commit first, later ones see the tombstone."""
        await conn.execute(LOCK, tenant)
        await conn.execute(_BEGIN, tenant, event_id, scope, subject, cutoff)

    async def add(self, conn: Any, tenant: str, event_id: str, counts: Mapping[str, int]) -> None:
        """Add ``counts`` to the erase's receipt (in the transaction of what they count)."""
        if any(counts.values()):
            await conn.execute(_ADD, tenant, event_id, json.dumps(dict(counts)))

    async def finish(self, conn: Any, tenant: str, event_id: str) -> None:
        await conn.execute(_FINISH, tenant, event_id)

    async def get(self, conn: Any, tenant: str, event_id: str) -> Receipt | None:
        row = await conn.fetchrow(_GET, tenant, event_id)
        if row is None:
            return None
        counts = row["counts"]
        if isinstance(counts, str):
            counts = json.loads(counts)
        return Receipt(
            event_id=row["event_id"],
            scope=row["scope"],
            state=row["state"],
            counts={str(k): int(v) for k, v in dict(counts).items()},
            started_at=row["started_at"],
            finished_at=row["finished_at"],
        )

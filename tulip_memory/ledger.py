"""The event ledger: one row per event of a tenant, written in the transaction of its
effects.

A redelivered event finds its row and is a no-op (exactly-once effect on
at-least-once delivery). Keys name namespaces (user ids), so the rows are the
tenant's, under forced row-level security like the memories: every statement takes
the ``tenant`` its connection is pinned to (``namespace[0]`` for session events).
Reasons are redacted (:func:`~tulip_memory.redaction.redact`: class, length, hash);
the full reason and the event's content live only in the tenant's dead letter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tulip_memory.redaction import REDACT_SQL, redact
from tulip_memory.store.postgres.family import Family, FixedTable, Migration, tenant_rls
from tulip_memory.store.postgres.render import render

TABLE = "public.tulip_event_ledger"
APPLIED, DEAD, REPLAYING = "applied", "dead", "replaying"
#: Recorded, but the sequence fence kept (some of) its writes out: a newer event's rows
#: (or, for memories, a fact observed later) stand.
SUPERSEDED = "superseded"
#: A worker is done with the event: a redelivery changes nothing.
DONE = (APPLIED, SUPERSEDED, DEAD)

#: Templates over ``{t}`` (the table) and ``{p}`` (its bare name).
LEDGER = Family(
    "event ledger",
    (
        Migration(
            1,
            "event ledger",
            (
                """CREATE TABLE {t} (
                    event_id text PRIMARY KEY,
                    type text NOT NULL,
                    key text NOT NULL,
                    seq bigint,
                    status text NOT NULL CHECK (status IN ('applied', 'dead', 'replaying')),
                    reason text,
                    attempts integer NOT NULL DEFAULT 0,
                    memories integer,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    updated_at timestamptz NOT NULL DEFAULT now()
                )""",
                "CREATE INDEX {p}_dead ON {t} (updated_at) WHERE status = 'dead'",
            ),
        ),
        Migration(
            2,
            "newest applied sequence per key",
            ("CREATE INDEX {p}_key ON {t} (type, key, seq) WHERE status = 'applied'",),
        ),
        Migration(
            3,
            "owned by the owner role; the application role records, the operators replay",
            (
                "GRANT SELECT, INSERT, UPDATE ON {t} TO tulip_dml",
                "GRANT SELECT ON {t}_migrations TO tulip_dml, tulip_ops",
                "GRANT SELECT, INSERT, UPDATE, DELETE ON {t} TO tulip_ops",
            ),
        ),
        Migration(
            4,
            "rows of a tenant, under forced row-level security; reasons redacted",
            (
                "ALTER TABLE {t} ADD COLUMN tenant text",
                """UPDATE {t} SET tenant = CASE
                    WHEN type = 'session.ended' OR strpos(key, chr(31)) > 0
                    THEN split_part(key, chr(31), 1)
                    WHEN type = 'unknown' THEN '_unknown' ELSE '_threads' END""",
                "UPDATE {t} SET reason = {redacted} WHERE reason IS NOT NULL",
                "ALTER TABLE {t} ALTER COLUMN tenant SET NOT NULL",
                "ALTER TABLE {t} DROP CONSTRAINT {p}_pkey",
                "ALTER TABLE {t} ADD PRIMARY KEY (tenant, event_id)",
                "DROP INDEX {t}_key",
                "CREATE INDEX {p}_key ON {t} (tenant, type, key, seq) WHERE status = 'applied'",
                *tenant_rls(),
            ),
        ),
        Migration(
            5,
            "an event whose write the sequence fence skipped is superseded, not applied",
            (
                "ALTER TABLE {t} DROP CONSTRAINT {p}_status_check",
                """ALTER TABLE {t} ADD CONSTRAINT {p}_status_check
                    CHECK (status IN ('applied', 'superseded', 'dead', 'replaying'))""",
            ),
        ),
    ),
)
#: What the ledger's templates name besides ``{t}``.
_NAMES = {"p": TABLE.rpartition(".")[2], "redacted": render(REDACT_SQL, r="reason")}

_GET = f"SELECT * FROM {TABLE} WHERE tenant = $1 AND event_id = $2"
_NEWEST = f"""
SELECT max(seq) FROM {TABLE}
WHERE tenant = $1 AND type = $2 AND key = $3 AND status = 'applied'"""
_CLAIM = f"""
INSERT INTO {TABLE} AS l (tenant, event_id, type, key, seq, status, attempts, memories)
VALUES ($1, $2, $3, $4, $5, $8, $6, $7)
ON CONFLICT (tenant, event_id) DO UPDATE SET
    status = EXCLUDED.status, reason = NULL, attempts = l.attempts + EXCLUDED.attempts,
    memories = EXCLUDED.memories, updated_at = now()
WHERE l.status = 'replaying'
RETURNING 1"""
_DEAD = f"""
INSERT INTO {TABLE} AS l (tenant, event_id, type, key, seq, status, reason, attempts)
VALUES ($1, $2, $3, $4, $5, 'dead', $6, $7)
ON CONFLICT (tenant, event_id) DO UPDATE SET
    status = 'dead', reason = EXCLUDED.reason, attempts = l.attempts + EXCLUDED.attempts,
    updated_at = now()
WHERE l.status NOT IN ('applied', 'superseded')"""
_SUPERSEDED = f"""
UPDATE {TABLE} SET status = 'superseded', updated_at = now()
WHERE tenant = $1 AND event_id = $2 AND status = 'applied'"""
_REPLAYING = f"""
UPDATE {TABLE} SET status = 'replaying', updated_at = now()
WHERE tenant = $1 AND event_id = $2 AND status = 'dead' RETURNING 1"""


@dataclass(frozen=True)
class LedgerEntry:
    tenant: str
    event_id: str
    type: str
    key: str
    seq: int | None
    status: str
    reason: str | None
    attempts: int
    memories: int | None
    updated_at: datetime

    @classmethod
    def from_row(cls, r: Any) -> LedgerEntry:
        return cls(
            tenant=r["tenant"],
            event_id=r["event_id"],
            type=r["type"],
            key=r["key"],
            seq=r["seq"],
            status=r["status"],
            reason=r["reason"],
            attempts=r["attempts"],
            memories=r["memories"],
            updated_at=r["updated_at"],
        )

    @property
    def done(self) -> bool:
        """Applied, superseded or dead: a redelivery of this event must change nothing."""
        return self.status in DONE


class EventLedger(FixedTable):
    """Ledger statements; each takes the connection of the caller's transaction."""

    family, table, names = LEDGER, TABLE, _NAMES

    async def get(self, conn: Any, event_id: str, *, tenant: str) -> LedgerEntry | None:
        """The event's row if it is ``tenant``'s (``conn`` pinned to it): another
        tenant's event of the same id is not this one, and is never visible."""
        row = await conn.fetchrow(_GET, tenant, event_id)
        return None if row is None else LedgerEntry.from_row(row)

    async def claim(
        self,
        conn: Any,
        *,
        tenant: str,
        event_id: str,
        type: str,
        key: str,
        seq: int | None,
        attempts: int,
        memories: int,
        superseded: bool = False,
    ) -> bool:
        """Record the event as applied (``superseded`` when the caller knows a newer
        event of the key was applied first, so the fence skips its writes); ``False``
        when it already was (or died): the caller's transaction must then roll back
        its effects."""
        status = SUPERSEDED if superseded else APPLIED
        args = (tenant, event_id, type, key, seq, attempts, memories, status)
        return await conn.fetchrow(_CLAIM, *args) is not None

    async def supersede(self, conn: Any, event_id: str, *, tenant: str) -> None:
        """Record ``tenant``'s event, claimed in this transaction, as ``superseded``:
        the sequence fence kept (some of) its writes out."""
        await conn.execute(_SUPERSEDED, tenant, event_id)

    async def record_dead(
        self,
        conn: Any,
        *,
        tenant: str,
        event_id: str,
        type: str,
        key: str,
        seq: int | None,
        reason: str,
        attempts: int,
    ) -> None:
        """Record the event as dead with ``reason`` redacted (its class, length and
        hash: the full reason lives only in the tenant's dead letter)."""
        await conn.execute(_DEAD, tenant, event_id, type, key, seq, redact(reason), attempts)

    async def newest_applied_seq(
        self, conn: Any, type: str, key: str, *, tenant: str
    ) -> int | None:
        """The highest sequence number applied for ``tenant``'s ``key``, if any."""
        value = await conn.fetchval(_NEWEST, tenant, type, key)
        return None if value is None else int(value)

    async def mark_replaying(self, conn: Any, event_id: str, *, tenant: str) -> bool:
        return await conn.fetchrow(_REPLAYING, tenant, event_id) is not None

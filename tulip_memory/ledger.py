"""The event ledger: one row per event id, written in the transaction of its effects.

A redelivered event finds its row and is a no-op (exactly-once effect on
at-least-once delivery). The ledger holds ids, keys, statuses and reasons, never
memory content, so it is not tenant-scoped and ``Reader.status(event_id)`` can read
it; the content of events that failed for good lives in the tenant-scoped
dead-letter table of the workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tulip_memory.store.postgres.audit import Expected, expected_objects
from tulip_memory.store.postgres.schema import Step, apply_migrations, verify_migrations

TABLE = "public.tulip_event_ledger"
APPLIED, DEAD, REPLAYING = "applied", "dead", "replaying"

_MIGRATIONS: list[Step] = [
    (
        1,
        "event ledger",
        [
            f"""CREATE TABLE {TABLE} (
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
            f"CREATE INDEX tulip_event_ledger_dead ON {TABLE} (updated_at) WHERE status = 'dead'",
        ],
    ),
]

_MIGRATIONS.append(
    (
        2,
        "newest applied sequence per key",
        [
            f"CREATE INDEX tulip_event_ledger_key ON {TABLE} (type, key, seq) "
            "WHERE status = 'applied'"
        ],
    )
)

_MIGRATIONS.append(
    (
        3,
        "owned by the owner role; the application role records, the operators replay",
        [
            f"GRANT SELECT, INSERT, UPDATE ON {TABLE} TO tulip_dml",
            f"GRANT SELECT ON {TABLE}_migrations TO tulip_dml, tulip_ops",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON {TABLE} TO tulip_ops",
        ],
    )
)

_GET = f"SELECT * FROM {TABLE} WHERE event_id = $1"
_NEWEST = f"""
SELECT max(seq) FROM {TABLE} WHERE type = $1 AND key = $2 AND status = 'applied'"""
_CLAIM = f"""
INSERT INTO {TABLE} AS l (event_id, type, key, seq, status, attempts, memories)
VALUES ($1, $2, $3, $4, 'applied', $5, $6)
ON CONFLICT (event_id) DO UPDATE SET
    status = 'applied', reason = NULL, attempts = l.attempts + EXCLUDED.attempts,
    memories = EXCLUDED.memories, updated_at = now()
WHERE l.status = 'replaying'
RETURNING 1"""
_DEAD = f"""
INSERT INTO {TABLE} AS l (event_id, type, key, seq, status, reason, attempts)
VALUES ($1, $2, $3, $4, 'dead', $5, $6)
ON CONFLICT (event_id) DO UPDATE SET
    status = 'dead', reason = EXCLUDED.reason, attempts = l.attempts + EXCLUDED.attempts,
    updated_at = now()
WHERE l.status <> 'applied'"""
_REPLAYING = f"""
UPDATE {TABLE} SET status = 'replaying', updated_at = now()
WHERE event_id = $1 AND status = 'dead' RETURNING 1"""


@dataclass(frozen=True)
class LedgerEntry:
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
        """Applied or dead: a redelivery of this event must change nothing."""
        return self.status in (APPLIED, DEAD)


class EventLedger:
    """Ledger statements; each takes the connection of the caller's transaction."""

    async def migrate(self, conn: Any) -> None:
        """Create or update the table; ``conn`` acts as the owner role."""
        await apply_migrations(conn, TABLE, _MIGRATIONS)

    def expected(self) -> dict[str, Expected]:
        """What the migrations leave on the table (for the admin tools' audit)."""
        return expected_objects(TABLE, [s for _, _, stmts in _MIGRATIONS for s in stmts])

    async def ensure(self, conn: Any) -> None:
        """Refuse a ledger that provisioning has not brought to this code's version."""
        await verify_migrations(conn, TABLE, [v for v, _, _ in _MIGRATIONS])

    async def get(self, conn: Any, event_id: str) -> LedgerEntry | None:
        row = await conn.fetchrow(_GET, event_id)
        return None if row is None else LedgerEntry.from_row(row)

    async def claim(
        self,
        conn: Any,
        *,
        event_id: str,
        type: str,
        key: str,
        seq: int | None,
        attempts: int,
        memories: int,
    ) -> bool:
        """Record the event as applied; ``False`` when it already was (or died): the
        caller's transaction must then roll back its effects."""
        row = await conn.fetchrow(_CLAIM, event_id, type, key, seq, attempts, memories)
        return row is not None

    async def record_dead(
        self,
        conn: Any,
        *,
        event_id: str,
        type: str,
        key: str,
        seq: int | None,
        reason: str,
        attempts: int,
    ) -> None:
        await conn.execute(_DEAD, event_id, type, key, seq, reason[:2000], attempts)

    async def newest_applied_seq(self, conn: Any, type: str, key: str) -> int | None:
        """The highest sequence number applied for ``key``, if any."""
        value = await conn.fetchval(_NEWEST, type, key)
        return None if value is None else int(value)

    async def mark_replaying(self, conn: Any, event_id: str) -> bool:
        return await conn.fetchrow(_REPLAYING, event_id) is not None

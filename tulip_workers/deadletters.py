"""Events that failed for good, kept whole with their reason until replayed.

Rows hold the event's content, so the table is tenant-scoped like the memories:
forced row-level security on ``tenant``. The worker writes a dead letter with its
event's tenant pinned; the ``tulip-memory dlq`` commands read across tenants through
an administrator connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tulip_memory.store.postgres.audit import Expected, expected_objects
from tulip_memory.store.postgres.schema import Step, apply_migrations, verify_migrations

TABLE = "public.tulip_dead_letters"
#: The tenant recorded for an event too malformed to name its own.
UNKNOWN_TENANT = "_unknown"

_MIGRATIONS: list[Step] = [
    (
        1,
        "dead letters",
        [
            f"""CREATE TABLE {TABLE} (
                event_id text PRIMARY KEY,
                tenant text NOT NULL,
                type text,
                key text,
                seq bigint,
                reason text NOT NULL,
                body text NOT NULL,
                attempts integer NOT NULL,
                failed_at timestamptz NOT NULL DEFAULT now(),
                replayed_at timestamptz
            )""",
            f"ALTER TABLE {TABLE} ENABLE ROW LEVEL SECURITY",
            f"ALTER TABLE {TABLE} FORCE ROW LEVEL SECURITY",
            f"""CREATE POLICY tulip_dead_letters_tenant ON {TABLE}
                USING (tenant = current_setting('tulip.tenant', true))
                WITH CHECK (tenant = current_setting('tulip.tenant', true))""",
        ],
    ),
]

_MIGRATIONS.append(
    (
        2,
        "owned by the owner role; workers write, the operators read and replay",
        [
            f"GRANT SELECT, INSERT, UPDATE ON {TABLE} TO tulip_dml",
            f"GRANT SELECT ON {TABLE}_migrations TO tulip_dml, tulip_ops",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON {TABLE} TO tulip_ops",
        ],
    )
)

_PUT = f"""
INSERT INTO {TABLE} (event_id, tenant, type, key, seq, reason, body, attempts)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (event_id) DO UPDATE SET
    reason = EXCLUDED.reason, body = EXCLUDED.body, attempts = EXCLUDED.attempts,
    failed_at = now(), replayed_at = NULL"""
_LIST = f"""
SELECT * FROM {TABLE} WHERE replayed_at IS NULL OR $1
ORDER BY failed_at DESC LIMIT $2"""
_GET = f"SELECT * FROM {TABLE} WHERE event_id = $1"
_REPLAYED = f"UPDATE {TABLE} SET replayed_at = now() WHERE event_id = $1"


@dataclass(frozen=True)
class DeadLetter:
    event_id: str
    tenant: str
    type: str | None
    key: str | None
    seq: int | None
    reason: str
    body: str
    attempts: int
    failed_at: datetime
    replayed_at: datetime | None

    @classmethod
    def from_row(cls, r: Any) -> DeadLetter:
        return cls(**{f: r[f] for f in cls.__dataclass_fields__})


class DeadLetters:
    """Dead-letter statements; each takes the connection of the caller's transaction."""

    async def migrate(self, conn: Any) -> None:
        """Create or update the table; ``conn`` acts as the owner role."""
        await apply_migrations(conn, TABLE, _MIGRATIONS)

    def expected(self) -> dict[str, Expected]:
        """What the migrations leave on the table (for the admin tools' audit)."""
        return expected_objects(TABLE, [s for _, _, stmts in _MIGRATIONS for s in stmts])

    async def ensure(self, conn: Any) -> None:
        """Refuse a table that provisioning has not brought to this code's version."""
        await verify_migrations(conn, TABLE, [v for v, _, _ in _MIGRATIONS])

    async def put(self, conn: Any, letter: DeadLetter) -> None:
        await conn.execute(
            _PUT,
            letter.event_id,
            letter.tenant,
            letter.type,
            letter.key,
            letter.seq,
            letter.reason[:2000],
            letter.body,
            letter.attempts,
        )

    async def list(
        self, conn: Any, *, limit: int = 50, include_replayed: bool = False
    ) -> list[DeadLetter]:
        return [DeadLetter.from_row(r) for r in await conn.fetch(_LIST, include_replayed, limit)]

    async def get(self, conn: Any, event_id: str) -> DeadLetter | None:
        row = await conn.fetchrow(_GET, event_id)
        return None if row is None else DeadLetter.from_row(row)

    async def mark_replayed(self, conn: Any, event_id: str) -> None:
        await conn.execute(_REPLAYED, event_id)

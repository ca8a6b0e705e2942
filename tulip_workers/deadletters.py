"""Events that failed for good, kept whole with their reason until replayed.

Rows hold the event's content, so the table is tenant-scoped like the memories:
forced row-level security on ``tenant``, and keyed by ``(tenant, event_id)`` like the
event ledger, so one tenant's letter never stands in the way of (or reveals itself
to) another tenant's letter of the same id. The worker writes a dead letter with its
event's tenant pinned; the ``tulip-memory dlq`` commands read across tenants through
an administrator connection.

The body is kept as the bytes that arrived (``raw``, bytea) with its sha256 and size,
so no content can make the dead letter itself fail: NUL bytes, lone surrogates and
bodies that are not text at all are stored as they came. Only when even that write
fails is a *minimal* letter written instead (:func:`minimal`): the event id, the
digest and size of the body, and the reason, with no content at all.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from tulip_memory.store.postgres.family import Family, FixedTable, Migration, tenant_rls

TABLE = "public.tulip_dead_letters"
#: The tenant recorded for an event too malformed to name its own.
UNKNOWN_TENANT = "_unknown"
MAX_REASON_CHARS = 2000
_MAX_NAME_CHARS = 2048

#: Templates over ``{t}`` (the table) and ``{p}`` (its bare name).
LETTERS = Family(
    "dead letters",
    (
        Migration(
            1,
            "dead letters",
            (
                """CREATE TABLE {t} (
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
                *tenant_rls(),
            ),
        ),
        Migration(
            2,
            "owned by the owner role; workers write, the operators read and replay",
            (
                "GRANT SELECT, INSERT, UPDATE ON {t} TO tulip_dml",
                "GRANT SELECT ON {t}_migrations TO tulip_dml, tulip_ops",
                "GRANT SELECT, INSERT, UPDATE, DELETE ON {t} TO tulip_ops",
            ),
        ),
        Migration(
            3,
            "dead letter bodies as bytes, with digest and size",
            (
                "ALTER TABLE {t} ADD COLUMN raw bytea",
                "ALTER TABLE {t} ADD COLUMN sha256 text",
                "ALTER TABLE {t} ADD COLUMN size bigint",
                """UPDATE {t} SET raw = convert_to(body, 'UTF8'),
                    sha256 = encode(sha256(convert_to(body, 'UTF8')), 'hex'),
                    size = octet_length(convert_to(body, 'UTF8'))""",
                "ALTER TABLE {t} DROP COLUMN body",
                "ALTER TABLE {t} ALTER COLUMN sha256 SET NOT NULL",
                "ALTER TABLE {t} ALTER COLUMN size SET NOT NULL",
            ),
        ),
        Migration(
            4,
            "a dead letter is its tenant's: keyed by (tenant, event_id), like the ledger",
            (
                "ALTER TABLE {t} DROP CONSTRAINT {p}_pkey",
                "ALTER TABLE {t} ADD PRIMARY KEY (tenant, event_id)",
            ),
        ),
    ),
)
_NAMES = {"p": TABLE.rpartition(".")[2]}

_PUT = f"""
INSERT INTO {TABLE} (event_id, tenant, type, key, seq, reason, raw, sha256, size, attempts)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (tenant, event_id) DO UPDATE SET
    reason = EXCLUDED.reason, raw = EXCLUDED.raw, sha256 = EXCLUDED.sha256,
    size = EXCLUDED.size, attempts = EXCLUDED.attempts, failed_at = now(), replayed_at = NULL"""
_LIST = f"""
SELECT * FROM {TABLE} WHERE replayed_at IS NULL OR $1
ORDER BY failed_at DESC LIMIT $2"""
_GET = f"SELECT * FROM {TABLE} WHERE tenant = $1 AND event_id = $2"
_FIND = f"SELECT * FROM {TABLE} WHERE event_id = $1 ORDER BY tenant"
_REPLAYED = f"UPDATE {TABLE} SET replayed_at = now() WHERE tenant = $1 AND event_id = $2"
_FIELDS = ("event_id", "tenant", "type", "key", "seq", "reason", "raw", "sha256", "size")


def body_bytes(body: object) -> bytes:
    """The bytes of a task argument as it arrived: text as UTF-8 (lone surrogates
    kept, so a replay sends the same text), anything else (a forged message's int,
    list, ...) as its JSON, else its type name."""
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        return body.encode("utf-8", "surrogatepass")
    try:
        return json.dumps(body, ensure_ascii=True, default=repr).encode("ascii")
    except (ValueError, TypeError, RecursionError):
        return f"<unserializable {type(body).__name__}>".encode("ascii")


def safe_text(text: str, limit: int = _MAX_NAME_CHARS) -> str:
    """``text`` as Postgres can always store it: no NUL, no lone surrogate."""
    clean = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    return clean[:limit]


@dataclass(frozen=True)
class DeadLetter:
    event_id: str
    tenant: str
    type: str | None
    key: str | None
    seq: int | None
    reason: str
    raw: bytes | None
    sha256: str
    size: int
    attempts: int
    failed_at: datetime
    replayed_at: datetime | None

    @classmethod
    def of(
        cls,
        *,
        event_id: str,
        tenant: str,
        type: str | None,
        key: str | None,
        seq: int | None,
        reason: str,
        body: object,
        attempts: int,
        failed_at: datetime,
    ) -> DeadLetter:
        raw = body_bytes(body)
        return cls(
            event_id=event_id,
            tenant=tenant,
            type=type,
            key=key,
            seq=seq,
            reason=reason,
            raw=raw,
            sha256=hashlib.sha256(raw).hexdigest(),
            size=len(raw),
            attempts=attempts,
            failed_at=failed_at,
            replayed_at=None,
        )

    @classmethod
    def from_row(cls, r: Any) -> DeadLetter:
        values = {f: r[f] for f in cls.__dataclass_fields__}
        return cls(**{**values, "raw": None if r["raw"] is None else bytes(r["raw"])})

    @property
    def body(self) -> str:
        """The body as text, exactly as it arrived (empty for a minimal letter); bytes
        that are not UTF-8 (a message refused before any task ran) as escapes."""
        if self.raw is None:
            return ""
        try:
            return self.raw.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return self.raw.decode("utf-8", "backslashreplace")

    @property
    def minimal(self) -> bool:
        return self.raw is None

    @property
    def digest_id(self) -> str:
        """Its body's digest as an event id (32 hex digits, like ``forged_event_id``)."""
        return self.sha256[:32]


def minimal(letter: DeadLetter, why: str | None = None) -> DeadLetter:
    """The letter without content: id, digest, size and reason (and why the full
    letter could not be written), in the unknown tenant. Nothing in it comes from the
    body, so nothing in it can fail to store."""
    note = f" [minimal letter: the full one failed: {why}]" if why else " [minimal letter]"
    reason = letter.reason + note
    return replace(
        letter,
        event_id=safe_text(letter.event_id, 200),
        tenant=UNKNOWN_TENANT,
        type=None,
        key=None,
        seq=None,
        reason=safe_text(reason, MAX_REASON_CHARS),
        raw=None,
    )


class DeadLetters(FixedTable):
    """Dead-letter statements; each takes the connection of the caller's transaction."""

    family, table, names = LETTERS, TABLE, _NAMES

    async def put(self, conn: Any, letter: DeadLetter) -> None:
        values = [getattr(letter, f) for f in _FIELDS]
        values[_FIELDS.index("reason")] = letter.reason[:MAX_REASON_CHARS]
        await conn.execute(_PUT, *values, letter.attempts)

    async def find(self, conn: Any, event_id: str) -> list[DeadLetter]:
        """Every dead letter of ``event_id`` that ``conn`` sees, one per tenant, by
        tenant (an operator sees all of them)."""
        return [DeadLetter.from_row(r) for r in await conn.fetch(_FIND, event_id)]

    async def list(
        self, conn: Any, *, limit: int = 50, include_replayed: bool = False
    ) -> list[DeadLetter]:
        return [DeadLetter.from_row(r) for r in await conn.fetch(_LIST, include_replayed, limit)]

    async def get(self, conn: Any, event_id: str, *, tenant: str) -> DeadLetter | None:
        """``tenant``'s dead letter of ``event_id`` (another tenant may hold the same id)."""
        row = await conn.fetchrow(_GET, tenant, event_id)
        return None if row is None else DeadLetter.from_row(row)

    async def mark_replayed(self, conn: Any, event_id: str, *, tenant: str) -> None:
        await conn.execute(_REPLAYED, tenant, event_id)

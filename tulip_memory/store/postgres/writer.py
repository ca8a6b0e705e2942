"""Writes inside one tenant-pinned transaction of ``PgMemory``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pgvector import Vector

from tulip_memory.embeddings.base import Vectors
from tulip_memory.store.validation import NS_SEP, encode_json, validate_namespace

#: ``(namespace, key, value_json, metadata_json, content)`` of one validated write.
Prepared = tuple[tuple[str, ...], str, str, str, str]


@dataclass(frozen=True)
class PreparedBatch:
    """Validated, encoded writes of one tenant, ready for :meth:`PgWriter.write`."""

    tenant: str
    rows: list[Prepared]
    vectors: list[Vectors | None]

    def args(self) -> tuple[Any, ...]:
        return (
            self.tenant,
            [NS_SEP.join(r[0]) for r in self.rows],
            [r[1] for r in self.rows],
            [r[2] for r in self.rows],
            [r[3] for r in self.rows],
            [r[4] for r in self.rows],
            # Vector objects, not ndarrays: asyncpg would read an ndarray element of a
            # vector[] as one more array dimension.
            [None if v is None else Vector(v) for v in self.vectors],
        )


@dataclass(frozen=True)
class TurnRow:
    """One completed turn: the text embedded, the structured turn, its metadata."""

    position: int
    text: str
    turn: dict[str, Any]
    metadata: dict[str, Any]


@dataclass(frozen=True)
class PreparedTurns:
    """A session's turns, validated and encoded, for :meth:`PgWriter.write_turns`."""

    namespace: tuple[str, ...]
    thread_id: str
    event_id: str
    rows: list[TurnRow]
    vectors: list[Vectors | None]

    @property
    def tenant(self) -> str:
        return self.namespace[0]

    def args(self, source_seq: int | None) -> tuple[Any, ...]:
        return (
            self.tenant,
            NS_SEP.join(self.namespace),
            self.thread_id,
            self.event_id,
            source_seq,
            [r.position for r in self.rows],
            [r.text for r in self.rows],
            [encode_json(r.turn, "turn") for r in self.rows],
            [encode_json(r.metadata, "turn metadata") for r in self.rows],
            [None if v is None else Vector(v) for v in self.vectors],
        )


@dataclass(frozen=True)
class PgWriter:
    """The handle of :meth:`PgMemory.transaction`; ``conn`` runs the caller's own
    statements in the same transaction."""

    conn: Any
    sql: dict[str, str]
    tenant: str

    async def write(self, batch: PreparedBatch, *, source_seq: int | None = None) -> None:
        """Upsert ``batch``; with ``source_seq``, rows written by a newer event win."""
        if batch.tenant != self.tenant:
            raise ValueError(
                f"batch of tenant {batch.tenant!r} in a transaction of {self.tenant!r}"
            )
        if source_seq is None:
            await self.conn.execute(self.sql["UPSERT"], *batch.args())
        else:
            await self.conn.execute(self.sql["UPSERT_FENCED"], *batch.args(), source_seq)

    async def write_turns(self, turns: PreparedTurns, *, source_seq: int | None = None) -> None:
        """Insert a session's turns; a second write of the same event adds nothing."""
        if turns.tenant != self.tenant:
            raise ValueError(
                f"turns of tenant {turns.tenant!r} in a transaction of {self.tenant!r}"
            )
        if turns.rows:
            await self.conn.execute(self.sql["INSERT_TURNS"], *turns.args(source_seq))

    async def prune(self, namespace: tuple[str, ...], keep: int) -> int:
        """Delete all but the ``keep`` most recently updated rows of ``namespace``."""
        ns = validate_namespace(namespace)
        if ns[0] != self.tenant:
            raise ValueError(f"namespace of tenant {ns[0]!r} in a transaction of {self.tenant!r}")
        status = await self.conn.execute(self.sql["PRUNE"], self.tenant, NS_SEP.join(ns), keep)
        return int(status.split()[-1])

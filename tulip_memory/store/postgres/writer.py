"""Writes inside one tenant-pinned transaction of ``PgMemory``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pgvector import Vector

from tulip_memory.embeddings.base import Vectors
from tulip_memory.store.postgres.slots import Layout
from tulip_memory.store.validation import NS_SEP, encode_json, validate_namespace

#: ``(namespace, key, value_json, metadata_json, content)`` of one validated write.
Prepared = tuple[tuple[str, ...], str, str, str, str]
#: The vectors of a batch's texts per slot (``None`` for a text without any).
SlotVectors = Mapping[str, list[Vectors | None]]


class SlotWriter(Protocol):
    """What a writer needs of its store: the layout, vectors per slot, statements."""

    async def layout_in(self, conn: Any, tenant: str, version: int) -> Layout: ...

    async def fill_slots(
        self, tenant: str, slots: Sequence[str], texts: list[str], have: SlotVectors
    ) -> list[list[Vectors | None]]: ...

    def upsert_sql(self, slots: Sequence[str], *, fenced: bool) -> str: ...

    def insert_turns_sql(self, slots: Sequence[str], *, replace: bool = False) -> str: ...

    def statement(self, name: str) -> str: ...


def vector_args(vectors: list[list[Vectors | None]]) -> tuple[list[Vector | None], ...]:
    """One ``vector[]`` argument per slot: Vector objects, not ndarrays (asyncpg would
    read an ndarray element of a vector[] as one more array dimension)."""
    return tuple([None if v is None else Vector(v) for v in vs] for vs in vectors)


@dataclass(frozen=True)
class PreparedBatch:
    """Validated, encoded writes of one tenant, ready for :meth:`PgWriter.write`."""

    tenant: str
    rows: list[Prepared]
    vectors: SlotVectors

    @property
    def texts(self) -> list[str]:
        return [r[4] for r in self.rows]

    def args(self) -> tuple[Any, ...]:
        return (
            self.tenant,
            [NS_SEP.join(r[0]) for r in self.rows],
            [r[1] for r in self.rows],
            [r[2] for r in self.rows],
            [r[3] for r in self.rows],
            [r[4] for r in self.rows],
        )


@dataclass(frozen=True)
class TurnRow:
    """One turn: the text embedded, the structured turn, its metadata, and its time
    (epoch seconds, the caller's; ``None``: the time of the write)."""

    position: int
    text: str
    turn: dict[str, Any]
    metadata: dict[str, Any]
    at: float | None = None


@dataclass(frozen=True)
class PreparedTurns:
    """A session's turns, validated and encoded, for :meth:`PgWriter.write_turns`."""

    namespace: tuple[str, ...]
    thread_id: str
    event_id: str
    rows: list[TurnRow]
    vectors: SlotVectors

    @property
    def tenant(self) -> str:
        return self.namespace[0]

    @property
    def texts(self) -> list[str]:
        return [r.text for r in self.rows]

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
            [r.at for r in self.rows],
        )


@dataclass
class PgWriter:
    """The handle of :meth:`PgMemory.transaction`; ``conn`` runs the caller's own
    statements in the same transaction. Writes fill every slot the tenant's layout
    names, as the layout stands inside this transaction."""

    conn: Any
    tenant: str
    slots: SlotWriter
    #: The layout version this transaction read under the shared lock.
    version: int
    _layout: Layout | None = field(default=None, repr=False)

    async def layout(self) -> Layout:
        """The tenant's slots, as of this transaction (under the shared lock)."""
        if self._layout is None:
            self._layout = await self.slots.layout_in(self.conn, self.tenant, self.version)
        return self._layout

    async def write(self, batch: PreparedBatch, *, source_seq: int | None = None) -> int:
        """Upsert ``batch``; with ``source_seq``, rows written by a newer event (or
        stating a fact observed later) win. Returns how many of the batch's rows the
        fence kept out (``0`` without ``source_seq``)."""
        if batch.tenant != self.tenant:
            raise ValueError(
                f"batch of tenant {batch.tenant!r} in a transaction of {self.tenant!r}"
            )
        layout = await self.layout()
        vectors = await self.slots.fill_slots(self.tenant, layout.write, batch.texts, batch.vectors)
        fenced = source_seq is not None
        statement = self.slots.upsert_sql(layout.write, fenced=fenced)
        seq = (source_seq,) if fenced else ()
        status = await self.conn.execute(statement, *batch.args(), *seq, *vector_args(vectors))
        # "INSERT 0 n": n rows inserted or updated; a row the fence's WHERE kept is not.
        return len(batch.rows) - int(status.split()[-1])

    async def write_turns(
        self, turns: PreparedTurns, *, source_seq: int | None = None, replace: bool = False
    ) -> None:
        """Insert a session's turns; a second write of the same event adds nothing.
        ``replace``: the rows complete turns already stored (same event and position)
        that have no reply yet; a turn that has one is left as it is."""
        if turns.tenant != self.tenant:
            raise ValueError(
                f"turns of tenant {turns.tenant!r} in a transaction of {self.tenant!r}"
            )
        if not turns.rows:
            return
        layout = await self.layout()
        vectors = await self.slots.fill_slots(self.tenant, layout.write, turns.texts, turns.vectors)
        statement = self.slots.insert_turns_sql(layout.write, replace=replace)
        await self.conn.execute(statement, *turns.args(source_seq), *vector_args(vectors))

    async def prune(self, namespace: tuple[str, ...], keep: int) -> int:
        """Delete all but the ``keep`` most recently updated rows of ``namespace``."""
        ns = validate_namespace(namespace)
        if ns[0] != self.tenant:
            raise ValueError(f"namespace of tenant {ns[0]!r} in a transaction of {self.tenant!r}")
        status = await self.conn.execute(
            self.slots.statement("PRUNE"), self.tenant, NS_SEP.join(ns), keep
        )
        return int(status.split()[-1])

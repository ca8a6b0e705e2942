"""Vector slots: one pgvector column per embedding model, and which ones a tenant uses.

A table starts with one slot, the ``embedding`` column, holding the vectors of the
model that created it. An online reindex adds a slot (a ``vector(dim)`` column on
the memories and the turns table, with its own index) for the new model; the
``<table>_layout`` rows say, per scope (``''`` for every tenant, or one tenant),
which slot recall reads and which slots every write fills:

- while a job runs, writes fill the old and the new slot, recall reads the old one;
- when every row has the new vector, one transaction points ``read_slot`` at the new
  slot: recall switches atomically, and writes still fill both;
- ``--finalize`` drops the old slot from the write set and removes its vectors.

Layout changes take an exclusive advisory lock that every write transaction holds
shared (:data:`~tulip_memory.store.postgres.sql.PIN_SHARED`), and bump a version
sequence under it; a writer reads the version after taking the lock and the layout
whenever the version moved: no write can commit vectors for a layout older than one a
reindex has already planned against.

Slot names are pasted into SQL as column names, so every name read from the registry,
a layout or a reindex job (:meth:`SlotInfo.from_row`, :meth:`Layout.from_row`,
``ReindexJob.from_row``), and every name a statement is built with, passes
:func:`column` first: ``embedding`` or ``embedding_<job id>``, nothing else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tulip_memory.errors import SchemaError
from tulip_memory.store.postgres.render import render

#: The original slot: the column every table is created with.
ORIGINAL_SLOT = "embedding"
#: The ``scope`` of the layout row that holds for every tenant without its own.
ALL_TENANTS = ""
#: Every slot name: the original column, or the column of reindex job ``<id>``.
SLOT_PATTERN = re.compile(r"embedding(?:_[1-9][0-9]{0,17})?")


class SlotNameError(SchemaError):
    """A slot name that is not one this code creates (a tampered registry or layout)."""


def column(slot: object) -> str:
    """``slot`` if it is a slot name this code creates, else :class:`SlotNameError`
    naming it: the one check before a slot name becomes part of a statement."""
    if isinstance(slot, str) and SLOT_PATTERN.fullmatch(slot):
        return slot
    raise SlotNameError(
        f"refused vector slot {slot!r}: slot names are 'embedding' or 'embedding_<job id>'; "
        "the table's slot registry or layout holds a name this code never wrote"
    )


@dataclass(frozen=True)
class SlotInfo:
    """One vector column: the model whose vectors it holds.

    ``spec`` is the model string :func:`~tulip_memory.embeddings.embedder_from_config`
    resolves (with ``api_base``); ``None`` for the original slot, whose vectors come
    from the embedder the store was built with."""

    slot: str
    model: str
    dim: int
    spec: str | None = None
    api_base: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> SlotInfo:
        slot = column(row["slot"])
        return cls(slot, row["model"], row["dim"], row["spec"], row["api_base"])


@dataclass(frozen=True)
class Layout:
    """The slot recall reads and the slots writes fill, for one tenant."""

    read: str
    write: tuple[str, ...]

    @classmethod
    def from_row(cls, row: Any) -> Layout:
        if row is None or row["read_slot"] is None:
            return DEFAULT_LAYOUT
        return cls(column(row["read_slot"]), tuple(column(s) for s in row["write_slots"]))


DEFAULT_LAYOUT = Layout(ORIGINAL_SLOT, (ORIGINAL_SLOT,))


def slot_name(job_id: int) -> str:
    """The column of the slot a reindex job creates."""
    return column(f"embedding_{job_id}")


def slot_index(table: str, slot: str) -> str:
    """The name of the HNSW index over a slot's column of ``table`` (bare name): the
    original one's from migration 3, else ``<table>_v<job id>``, short enough for
    Postgres' 63-byte identifiers with a 48-character table name."""
    if column(slot) == ORIGINAL_SLOT:
        return f"{table}_hnsw"
    return f"{table}_v{slot.removeprefix(ORIGINAL_SLOT + '_')}"


def ann_expr(slot: str, dim: int) -> str:
    """What a slot's HNSW index holds and the index path orders by: the slot's vectors
    as ``halfvec(dim)`` (pgvector >= 0.7). Half precision halves the graph's pages
    (the turns' graph of ``bench/recall.py``: 246 against 430 MB), so more of it stays
    in the buffers, and its distances cost less; the ranking itself recomputes every
    candidate's exact cosine over the full-precision column (``sql._indexed``). The
    planner matches an ORDER BY to the index by this very expression."""
    return f"({column(slot)}::halfvec({int(dim)}))"


def ann_using(slot: str, dim: int) -> str:
    """The ``USING`` clause of a slot's HNSW index (cosine distance over halfvec):
    migration 19's, the reindex's new slot's and the bench's."""
    return f"USING hnsw ({ann_expr(slot, dim)} halfvec_cosine_ops)"


def read_sql(template: str, slot: str, dim: int | None = None) -> str:
    """A read statement over the ``{v}`` slot column; with ``dim`` (the slot's width),
    ``{h}`` is the expression of the slot's HNSW index (:func:`ann_expr`)."""
    if dim is None:
        return render(template, v=column(slot))
    return render(template, v=column(slot), h=ann_expr(slot, dim))


#: A fenced write never replaces a fact observed later than its own (history imported
#: behind live traffic has newer sequence numbers but older times).
_OBSERVED = """
  AND (m.observed_at IS NULL OR EXCLUDED.observed_at IS NULL
       OR m.observed_at <= EXCLUDED.observed_at)"""


def upsert_sql(table: str, slots: Sequence[str], *, fenced: bool) -> str:
    """The memories upsert filling ``slots``: ``$1`` tenant, ``$2``–``$6`` the rows'
    namespace, key, value, metadata and content arrays, ``$7`` the source event
    sequence (fenced only), then one ``vector[]`` per slot. Fenced, a row is replaced
    only by an event at least as new (sequence) stating a fact observed no earlier."""
    first = 8 if fenced else 7
    arrays, names, sets = _vector_parts(slots, first)
    seq_col, seq_val = (", source_seq", ", $7::bigint") if fenced else ("", "")
    seq_set = "\n    source_seq = EXCLUDED.source_seq," if fenced else ""
    guard = "\nWHERE (m.source_seq IS NULL OR m.source_seq <= EXCLUDED.source_seq)" + _OBSERVED
    guard = guard if fenced else ""
    cols = "".join(f", {s}" for s in slots)
    vals = "".join(f", u.{n}" for n in names)
    return f"""
INSERT INTO {table} AS m (tenant, ns, key, value, metadata, content{seq_col}{cols})
SELECT $1, u.ns, u.key, u.value::jsonb, u.metadata::jsonb, u.content{seq_val}{vals}
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[]{arrays})
     AS u(ns, key, value, metadata, content{"".join(f", {n}" for n in names)})
ON CONFLICT (tenant, ns, key) DO UPDATE SET
    value = EXCLUDED.value,
    metadata = EXCLUDED.metadata,
    content = EXCLUDED.content,{sets}{seq_set}
    updated_at = clock_timestamp(),
    version = m.version + 1{guard}"""


def insert_turns_sql(table: str, slots: Sequence[str], *, replace: bool = False) -> str:
    """A session's turns into ``<table>_turns``, once per event, filling ``slots``:
    ``$1``–``$5`` tenant, namespace, thread, event, source sequence; ``$6``–``$10``
    the turns' positions, texts, turns, metadata and times (epoch seconds, NULL: now);
    then one ``vector[]`` per slot. ``replace``: a row of the same event and position
    that has no reply yet takes the new text, turn, metadata and vectors."""
    arrays, names, sets = _vector_parts(slots, 11)
    cols = "".join(f", {s}" for s in slots)
    vals = "".join(f", u.{n}" for n in names)
    conflict = "DO NOTHING"
    if replace:
        conflict = f"""(tenant, ns, event_id, position) DO UPDATE SET
    text = EXCLUDED.text,
    turn = EXCLUDED.turn,{sets}
    metadata = EXCLUDED.metadata
WHERE NOT t.turn ? 'reply'"""
    return f"""
INSERT INTO {table}_turns AS t (tenant, ns, thread_id, event_id, position, text, turn, metadata,
                                source_seq, created_at{cols})
SELECT $1, $2, $3, $4, u.position, u.text, u.turn::jsonb, u.metadata::jsonb, $5,
       coalesce(to_timestamp(u.at), clock_timestamp()){vals}
FROM unnest($6::int[], $7::text[], $8::text[], $9::text[], $10::float8[]{arrays})
     AS u(position, text, turn, metadata, at{"".join(f", {n}" for n in names)})
ON CONFLICT {conflict}"""


def _vector_parts(slots: Sequence[str], first: int) -> tuple[str, list[str], str]:
    slots = [column(s) for s in slots]
    arrays = "".join(f", ${first + i}::vector[]" for i in range(len(slots)))
    names = [f"v{i}" for i in range(len(slots))]
    sets = "".join(f"\n    {s} = EXCLUDED.{s}," for s in slots)
    return arrays, names, sets

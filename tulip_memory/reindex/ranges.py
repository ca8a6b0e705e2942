"""Keyset ranges: how a job cuts a tenant's rows into batches, and reads one back.

A range is ``[lo, hi)`` over a table's key order within one tenant (memories:
``(ns, key)``; turns: ``(ns, event_id, position)``), ``None`` meaning open. Bounds
come from one scan of the tenant's keys (every ``batch``-th key), so a range holds
``batch`` rows when planned; rows written later carry every slot's vector already.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tulip_memory.reindex import sql


@dataclass(frozen=True)
class Kind:
    """One table a job reindexes."""

    name: str
    bounds_sql: str
    rows_sql: str
    update_sql: str
    key_columns: tuple[str, ...]

    def key_arrays(self, rows: Any) -> list[list[Any]]:
        """The rows' key columns (and version, for memories) as parallel arrays."""
        return [[r[c] for r in rows] for c in self.key_columns]


MEMORIES = Kind(
    "memories", sql.MEMORY_BOUNDS, sql.MEMORY_ROWS, sql.SET_MEMORY_VECTORS, ("ns", "key", "version")
)
TURNS = Kind(
    "turns", sql.TURN_BOUNDS, sql.TURN_ROWS, sql.SET_TURN_VECTORS, ("ns", "event_id", "position")
)
KINDS = (MEMORIES, TURNS)
_BY_NAME = {k.name: k for k in KINDS}


@dataclass(frozen=True)
class Range:
    id: int
    tenant: str
    kind: str
    lo: str | None  # a JSON array of key columns, inclusive
    hi: str | None  # exclusive
    status: str

    @classmethod
    def from_row(cls, r: Any) -> Range:
        return cls(r["id"], r["tenant"], r["kind"], r["lo"], r["hi"], r["status"])

    @property
    def kind_spec(self) -> Kind:
        return _BY_NAME[self.kind]

    def bound_args(self, sweep: bool) -> tuple[Any, ...]:
        """``$2``... of the kind's rows statement."""
        lo = json.loads(self.lo) if self.lo else None
        hi = json.loads(self.hi) if self.hi else None
        args: tuple[Any, ...] = (
            lo[0] if lo else None,
            lo[1] if lo else None,
            hi[0] if hi else None,
            hi[1] if hi else None,
            sweep,
        )
        if self.kind == TURNS.name:
            args += (lo[2] if lo else None, hi[2] if hi else None)
        return args


def cut(tenant: str, kind: str, lows: list[str], first_id: int) -> list[Range]:
    """Ranges from each range's lower bound, in key order; the first is open below
    (rows inserted before it later still fall in a range), the last open above."""
    out = []
    for i, _ in enumerate(lows):
        lo = None if i == 0 else lows[i]
        hi = lows[i + 1] if i + 1 < len(lows) else None
        out.append(Range(first_id + i, tenant, kind, lo, hi, "pending"))
    return out

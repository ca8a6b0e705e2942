"""What a reindex job is: its row, its progress, and the errors it raises."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tulip_memory.errors import TulipMemoryError
from tulip_memory.store.postgres.slots import column


class ReindexError(TulipMemoryError):
    """A reindex cannot start, go on or end as asked; the message says why."""


class ReindexConflict(ReindexError):
    """Another open job already covers (part of) the scope."""


@dataclass(frozen=True)
class ReindexJob:
    """One reindex of a scope (every tenant, or one) to a model's new vector slot.

    ``status``: ``planning`` (slot added, ranges being cut), ``running``, ``paused``
    (a batch failed: ``error`` says why; ``resume`` goes on), ``cancelled``,
    ``switched`` (recall reads the new slot; the old vectors stay until finalize),
    ``finalized``. Every job but a finalized one holds its scope."""

    id: int
    scope: str
    slot: str
    model: str
    spec: str
    api_base: str | None
    dim: int
    batch: int
    planned_rows: int
    status: str
    error: str | None
    previous: dict[str, str]
    created_at: datetime
    updated_at: datetime
    switched_at: datetime | None
    finalized_at: datetime | None

    @property
    def tenant(self) -> str | None:
        """The tenant of a one-tenant job; ``None`` for every tenant."""
        return self.scope or None

    @property
    def scope_label(self) -> str:
        return f"tenant {self.scope!r}" if self.scope else "every tenant"

    @classmethod
    def from_row(cls, r: Any) -> ReindexJob:
        """The job of a ``<table>_reindex_jobs`` row; its slot names (``slot``, ``''``
        only while its transaction plans it, and ``previous``) are checked here, as
        read (:func:`~tulip_memory.store.postgres.slots.column`)."""
        previous = r["previous"]
        previous = json.loads(previous) if isinstance(previous, str) else dict(previous)
        return cls(
            id=r["id"],
            scope=r["scope"],
            slot=column(r["slot"]) if r["slot"] != "" else "",
            model=r["model"],
            spec=r["spec"],
            api_base=r["api_base"],
            dim=r["dim"],
            batch=r["batch"],
            planned_rows=r["planned_rows"],
            status=r["status"],
            error=r["error"],
            previous={scope: column(slot) for scope, slot in previous.items()},
            created_at=r["created_at"],
            updated_at=r["updated_at"],
            switched_at=r["switched_at"],
            finalized_at=r["finalized_at"],
        )


@dataclass(frozen=True)
class Progress:
    """How far a job is: ranges (batches) done of all, and rows embedded so far."""

    job: ReindexJob
    ranges: int
    ranges_done: int
    rows_done: int

    @property
    def fraction(self) -> float:
        if self.job.status in ("switched", "finalized"):
            return 1.0
        return self.ranges_done / self.ranges if self.ranges else 0.0

    @property
    def finished(self) -> bool:
        """Nothing more will happen without an operator: switched, finalized, paused
        or cancelled."""
        return self.job.status in ("switched", "finalized", "paused", "cancelled")

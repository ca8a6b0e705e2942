"""The synchronous read path: recall straight from Postgres, event status from the
ledger. No broker and no worker is involved in a read.

``AsyncReader`` is the implementation; ``Reader`` runs it on a private event loop
thread for synchronous backends.
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from tulip_memory._portal import Portal
from tulip_memory.config import store_from_env
from tulip_memory.ledger import APPLIED, DEAD, EventLedger
from tulip_memory.manager import Memory, MemoryType
from tulip_memory.store import PgMemory
from tulip_memory.store.validation import validate_namespace
from tulip_memory.turns import TurnHit

T = TypeVar("T")
TYPES = tuple(t.value for t in MemoryType)
State = Literal["pending", "applied", "dead"]


@dataclass(frozen=True)
class EventStatus:
    event_id: str
    state: State
    reason: str | None = None
    memories: int | None = None


class AsyncReader:
    def __init__(self, store: PgMemory) -> None:
        self.store = store
        self._ledger = EventLedger()
        self._ledger_ready = False

    @classmethod
    def from_env(cls) -> AsyncReader:
        return cls(store_from_env())

    async def recall(
        self, namespace: tuple[str, ...], query: str | None, limit: int = 10
    ) -> list[Memory]:
        """The ``limit`` memories of ``namespace`` most relevant to ``query`` (most
        recent without one), across every memory type, in one statement."""
        ns = validate_namespace(namespace)
        hits = await self.store.search_across([(*ns, t) for t in TYPES], query, limit)
        out = []
        for hit in hits:
            try:
                out.append(Memory.from_store_value(hit.item.value))
            except (KeyError, TypeError, ValueError):
                continue  # not a memory value (written outside the pipeline)
        return out

    async def recall_turns(
        self,
        namespace: tuple[str, ...],
        query: str,
        top_k: int = 5,
        threshold: float | None = None,
    ) -> list[TurnHit]:
        """The completed turns of ``namespace`` most similar to ``query``, exactly
        ranked; ``turn_index`` is the turn's position within its session."""
        matches = await self.store.search_turns(namespace, query, top_k, threshold)
        return [TurnHit(m.score, m.turn, m.position, m.text, m.metadata) for m in matches]

    async def status(self, event_id: str) -> EventStatus:
        """``pending`` until a worker applied the event or gave up on it."""
        async with self.store.transaction("_reader") as tx:
            if not self._ledger_ready:
                await self._ledger.ensure(tx.conn)
                self._ledger_ready = True
            entry = await self._ledger.get(tx.conn, event_id)
        if entry is None or entry.status not in (APPLIED, DEAD):
            return EventStatus(event_id, "pending")
        state: State = "applied" if entry.status == APPLIED else "dead"
        return EventStatus(event_id, state, entry.reason, entry.memories)

    async def close(self) -> None:
        await self.store.close()


class Reader:
    """Blocking :class:`AsyncReader` for synchronous chat backends."""

    def __init__(self, store: PgMemory) -> None:
        self._portal = Portal("tulip-reader")
        self.aio = AsyncReader(store)

    @classmethod
    def from_env(cls) -> Reader:
        return cls(store_from_env())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._portal.call(coro)

    def recall(
        self, namespace: tuple[str, ...], query: str | None, limit: int = 10
    ) -> list[Memory]:
        return self._call(self.aio.recall(namespace, query, limit))

    def recall_turns(
        self,
        namespace: tuple[str, ...],
        query: str,
        top_k: int = 5,
        threshold: float | None = None,
    ) -> list[TurnHit]:
        return self._call(self.aio.recall_turns(namespace, query, top_k, threshold))

    def status(self, event_id: str) -> EventStatus:
        return self._call(self.aio.status(event_id))

    def close(self) -> None:
        try:
            self._call(self.aio.close())
        finally:
            self._portal.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

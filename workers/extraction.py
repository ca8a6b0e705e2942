"""Apply one ``session.ended`` event: extract, embed, and write the memories and the
session's turns together with the event's ledger row, exactly once, in order.

The whole effect of an event (memory upserts fenced by its sequence number, pruning,
turns, the ledger row) commits in one transaction, so a redelivered event is a no-op
and an older event never overwrites what a newer one wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from producer.events import Envelope, decode_messages
from tulip_memory.manager import Memory, MemoryType
from tulip_memory.manager.block import strip_memory_blocks
from tulip_memory.messages import Message
from tulip_memory.store.postgres.store import TurnsIn
from tulip_memory.times import stated_time
from workers.event_worker import APPLIED, DEAD, DUPLICATE, AlreadyApplied, EventWorker
from workers.extractors import Extractor
from workers.turns import Clock, SessionTurns, session_turns, turn_context

__all__ = ["APPLIED", "DEAD", "DUPLICATE", "ExtractionWorker"]

TYPES = tuple(t.value for t in MemoryType)


@dataclass(kw_only=True)
class ExtractionWorker(EventWorker):
    extractor: Extractor
    max_memories: int = 50

    async def _apply(self, env: Envelope, attempt: int) -> str:
        payload = await self._payload(env)
        ns = tuple(payload["namespace"])
        messages = strip_memory_blocks(decode_messages(payload))
        existing = await self._existing(ns)
        memories = await self.extractor(messages, existing)
        items = [_item(ns, m, env, payload["thread_id"]) for m in memories]
        thread = payload["thread_id"]
        session = await self._turns(env, ns, thread, messages, payload.get("metadata", {}))
        batch, turns = await self.store.prepare_event(
            items, TurnsIn(ns, thread, env.id, session.rows)
        )
        completion = None
        if session.completion is not None and session.completes is not None:
            done = TurnsIn(ns, thread, session.completes.event_id, [session.completion])
            _, completion = await self.store.prepare_event([], done)
        try:
            async with self.store.transaction(ns[0]) as tx:
                claimed = await self.ledger.claim(
                    tx.conn,
                    event_id=env.id,
                    type=env.type,
                    key=env.key,
                    seq=env.seq,
                    attempts=attempt,
                    memories=len(items),
                )
                if not claimed:
                    raise AlreadyApplied
                if batch is not None:
                    await tx.write(batch, source_seq=env.seq)
                if turns is not None:
                    await tx.write_turns(turns, source_seq=env.seq)
                if completion is not None and session.completes is not None:
                    seq = session.completes.source_seq
                    await tx.write_turns(completion, source_seq=seq, replace=True)
                for kind in {m.type.value for m in memories}:
                    await tx.prune((*ns, kind), self.max_memories)
        except AlreadyApplied:
            return DUPLICATE
        return APPLIED

    async def _turns(
        self,
        env: Envelope,
        ns: tuple[str, ...],
        thread: str,
        messages: list[Message],
        metadata: dict[str, Any],
    ) -> SessionTurns:
        """The session's turns, and the thread's open turn its first reply completes."""
        clock = Clock(stated_time(metadata), env.ts)
        context = turn_context(ns, thread, env.id, metadata)
        last = None
        if messages and env.seq is not None:
            last = await self.store.last_turn(ns, thread, env.seq)
        return session_turns(messages, clock=clock, context=context, open_turn=last)

    async def _existing(self, ns: tuple[str, ...]) -> list[Memory]:
        found = await self.store.search_many([(*ns, t) for t in TYPES], None, self.max_memories)
        out = []
        for items in found:
            for item in items:
                try:
                    out.append(Memory.from_store_value(item.value))
                except (KeyError, TypeError, ValueError):
                    continue  # a row written outside the pipeline, not a memory
        return out


def _item(
    ns: tuple[str, ...], memory: Memory, env: Envelope, thread_id: str
) -> tuple[tuple[str, ...], str, Any, dict[str, Any] | None]:
    value = memory.to_store_value()
    value["metadata"] = {
        **value["metadata"],
        "updated_at": datetime.fromtimestamp(env.ts, UTC).isoformat(),
        "source_event": env.id,
        "source_seq": env.seq,
        "thread_id": thread_id,
    }
    return (*ns, memory.type.value), memory.key, value, None

"""Apply one ``session.ended`` event: extract, embed, and write the memories and the
session's turns together with the event's ledger row, exactly once, in order.

The whole effect of an event (memory upserts fenced by its sequence number, pruning,
turns, the ledger row) commits in one transaction, so a redelivered event is a no-op
and an older event never overwrites what a newer one wrote, nor a fact observed
earlier one observed later. When the fence keeps any of an event's memory rows out
(the upsert wrote fewer rows than it was given), its outcome, and its ledger row, is
``superseded``, never ``applied``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tulip_memory.manager import Memory, MemoryType
from tulip_memory.manager.block import strip_memory_blocks
from tulip_memory.messages import Message, message_id
from tulip_memory.store.postgres.store import TurnsIn
from tulip_memory.times import TIME_FIELD, iso, parse_time, stated_time
from tulip_wire.events import (
    MEMORY_FORGET,
    SESSION_ENDED,
    Envelope,
    EventError,
    decode_messages,
    tenant_of_key,
)
from tulip_workers.event_worker import (
    APPLIED,
    DEAD,
    DUPLICATE,
    SUPERSEDED,
    AlreadyApplied,
    EventWorker,
)
from tulip_workers.extractors import Extractor
from tulip_workers.overlap import beside
from tulip_workers.turns import Clock, SessionTurns, session_turns, turn_context

__all__ = ["APPLIED", "DEAD", "DUPLICATE", "SUPERSEDED", "ExtractionWorker"]

TYPES = tuple(t.value for t in MemoryType)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Read:
    """What an attempt reads before its model call: the payload (fetched, when it is
    claim-checked) and the namespace's memories the prompt shows."""

    payload: dict[str, Any]
    existing: list[Memory]


@dataclass(kw_only=True)
class ExtractionWorker(EventWorker):
    extractor: Extractor
    max_memories: int = 50

    async def _read_ahead(self, env: Envelope) -> _Read | None:
        if env.type != SESSION_ENDED:
            return None
        payload = await self._payload(env)
        return _Read(payload, await self._existing(tuple(payload["namespace"])))

    async def _apply(self, env: Envelope, attempt: int, ahead: object | None = None) -> str:
        if env.type == MEMORY_FORGET:
            return await self._forget(env, attempt)
        if env.type != SESSION_ENDED:
            raise EventError(f"a {env.type} event on an extraction queue", env.id)
        await self._erase_first(env, tenant_of_key(env.key))
        read = ahead if isinstance(ahead, _Read) else await self._read_ahead(env)
        assert read is not None
        payload = read.payload
        ns, thread = tuple(payload["namespace"]), payload["thread_id"]
        metadata = payload.get("metadata", {})
        clock = Clock(stated_time(metadata), env.ts)
        messages = strip_memory_blocks(decode_messages(payload))
        said = stamped(messages, clock)
        # The thread's open turn is read while the model runs: the prompt needs it not.
        memories, session = await beside(
            self.extractor(said, read.existing),
            self._turns(env, ns, thread, messages, clock, metadata),
        )
        memories = capped(memories, self.max_memories, env.id)
        items = [memory_item(ns, m, env, thread, said) for m in memories]
        batch, turns = await self.store.prepare_event(
            items, TurnsIn(ns, thread, env.id, session.rows)
        )
        completion = None
        if session.completion is not None and session.completes is not None:
            done = TurnsIn(ns, thread, session.completes.event_id, [session.completion])
            _, completion = await self.store.prepare_event([], done)
        try:
            async with self.store.transaction(ns[0]) as tx:
                if await self._fenced(tx.conn, env, ns[0]):
                    kept_out = -1  # an erase made after it: recorded, nothing written
                else:
                    claimed = await self.ledger.claim(
                        tx.conn,
                        tenant=ns[0],
                        event_id=env.id,
                        type=env.type,
                        key=env.key,
                        seq=env.seq,
                        attempts=attempt,
                        memories=len(items),
                    )
                    if not claimed:
                        raise AlreadyApplied
                    kept_out = 0
                    if batch is not None:
                        kept_out = await tx.write(batch, source_seq=env.seq)
                    if turns is not None:
                        await tx.write_turns(turns, source_seq=env.seq)
                    if completion is not None and session.completes is not None:
                        seq = session.completes.source_seq
                        await tx.write_turns(completion, source_seq=seq, replace=True)
                    for kind in {m.type.value for m in memories}:
                        await tx.prune((*ns, kind), self.max_memories)
                    if kept_out:
                        await self.ledger.supersede(tx.conn, env.id, tenant=ns[0])
        except AlreadyApplied:
            return DUPLICATE
        if kept_out < 0:
            await self._drop_claim(env)
        return SUPERSEDED if kept_out else APPLIED

    async def _turns(
        self,
        env: Envelope,
        ns: tuple[str, ...],
        thread: str,
        messages: list[Message],
        clock: Clock,
        metadata: dict[str, Any],
    ) -> SessionTurns:
        """The session's turns, and the thread's open turn its first reply completes."""
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


def stamped(messages: Sequence[Message], clock: Clock) -> list[Message]:
    """The messages an extractor reads: each with its time in ``metadata["timestamp"]``
    (epoch seconds, by :mod:`tulip_memory.times`' rule)."""
    return [replace(m, metadata={**m.metadata, TIME_FIELD: clock.of(m)}) for m in messages]


def capped(memories: Sequence[Memory], per_type: int, event_id: str) -> list[Memory]:
    """The first ``per_type`` memories of each type, in the extractor's order (a model
    lists what matters first). A namespace keeps ``per_type`` of a type, so more from
    one answer would be embedded and written only for the prune of the same
    transaction to delete them, the answer's own among them in key order; a model
    spewing thousands (up to what ``extract.parse.MAX_OUTPUT_CHARS`` admits) costs
    no more than this."""
    seen: Counter[MemoryType] = Counter()
    kept = []
    for memory in memories:
        seen[memory.type] += 1
        if seen[memory.type] <= per_type:
            kept.append(memory)
    if len(kept) < len(memories):
        log.warning(
            "event %s: %d of %d extracted memories dropped, over %d of a type",
            event_id,
            len(memories) - len(kept),
            len(memories),
            per_type,
        )
    return kept


def memory_item(
    ns: tuple[str, ...], memory: Memory, env: Envelope, thread_id: str, said: Sequence[Message]
) -> tuple[tuple[str, ...], str, Any, dict[str, Any] | None]:
    """The store write of one memory, with where and when it was said.

    ``source_ids``: the ids the extractor named that are ids of this session's
    messages (anything else a model returns is dropped); ``observed_at``: the latest
    time of those messages, else the time the extractor read off its message, else the
    session's last message's (the publish time for a session without messages).
    """
    times = {i: m.metadata[TIME_FIELD] for m in said if (i := message_id(m)) is not None}
    named = memory.metadata.get("source_ids")
    sources = [i for i in dict.fromkeys(named) if i in times] if isinstance(named, list) else []
    observed = _observed(memory, [times[i] for i in sources], said, env.ts)
    value = memory.to_store_value()
    value["metadata"] = {
        **value["metadata"],
        "observed_at": iso(observed),
        "source_ids": sources,
        "updated_at": iso(env.ts),
        "source_event": env.id,
        "source_seq": env.seq,
        "thread_id": thread_id,
    }
    indexed = {"observed_at": observed, "source_ids": sources}
    return (*ns, memory.type.value), memory.key, value, indexed


def _observed(
    memory: Memory, source_times: list[float], said: Sequence[Message], ts: float
) -> float:
    if source_times:
        return max(source_times)
    try:
        return parse_time(memory.metadata["observed_at"])
    except (KeyError, ValueError):
        return float(said[-1].metadata[TIME_FIELD]) if said else ts

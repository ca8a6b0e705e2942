"""Apply one ``checkpoint.saved`` event: write the state to the checkpoint store, in
order per thread, exactly once, then clear the thread's pending state.

Thread state is keyed by (tenant, thread id): the event's payload names both, its key is
made of both (checked on decode and after a claim-check fetch), and the state is written
through the tenant's view of the store. Idempotent by checkpoint id (a redelivery finds
the checkpoint already stored and the ledger row already written). An event older than
one already applied for its thread is recorded but not written (outcome ``superseded``,
never ``applied``): an older checkpoint never becomes the head. The pending overlay is
cleared only after the store has the state, and only if it still holds this checkpoint
(a newer save may have replaced it).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import cached_property

from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.tenants import TenantCheckpointers
from tulip_memory.state import AgentState
from tulip_memory.summaries import SummaryBudget, SummaryStore
from tulip_wire.events import Envelope
from tulip_wire.pending import PendingStates
from tulip_workers.event_worker import (
    APPLIED,
    DUPLICATE,
    SUPERSEDED,
    AlreadyApplied,
    EventWorker,
)
from tulip_workers.summarizer import SummaryScheduler, SummaryTrigger

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class CheckpointWorker(EventWorker):
    """``checkpointer`` is the store of every tenant; each event writes through its
    tenant's view of it (:mod:`tulip_memory.delta.tenants`)."""

    checkpointer: DeltaCheckpointer
    pending: PendingStates | None = None
    scheduler: SummaryScheduler | None = None
    summary_budget: SummaryBudget | None = None
    _tenants: TenantCheckpointers | None = None

    def threads(self, tenant: str) -> DeltaCheckpointer:
        """``tenant``'s threads on the checkpoint store."""
        if self._tenants is None or self._tenants.base is not self.checkpointer:
            self._tenants = TenantCheckpointers(self.checkpointer)
        return self._tenants.of(tenant)

    @cached_property
    def _summary_trigger(self) -> SummaryTrigger | None:
        if self.scheduler is None or self.summary_budget is None:
            return None
        return SummaryTrigger(self.summary_budget, self.scheduler)

    async def _apply(self, env: Envelope, attempt: int) -> str:
        payload = await self._payload(env)
        tenant, thread = payload["tenant"], payload["thread_id"]
        checkpoint_id = payload["checkpoint_id"]
        async with self.store.transaction(tenant) as tx:
            newest = await self.ledger.newest_applied_seq(tx.conn, env.type, env.key, tenant=tenant)
        superseded = newest is not None and env.seq is not None and env.seq < newest
        state = AgentState.from_checkpoint(payload["state"])
        if not superseded:
            await self._write(self.threads(tenant), thread, checkpoint_id, state)
        try:
            async with self.store.transaction(tenant) as tx:
                claimed = await self.ledger.claim(
                    tx.conn,
                    tenant=tenant,
                    event_id=env.id,
                    type=env.type,
                    key=env.key,
                    seq=env.seq,
                    attempts=attempt,
                    memories=0,
                    superseded=superseded,
                )
                if not claimed:
                    raise AlreadyApplied
        except AlreadyApplied:
            return DUPLICATE
        if self.pending is not None:
            await asyncio.to_thread(self.pending.clear_if, tenant, thread, checkpoint_id)
        if not superseded:
            await self._maybe_summarize(tenant, thread, state)
        return SUPERSEDED if superseded else APPLIED

    async def _maybe_summarize(self, tenant: str, thread: str, state: AgentState) -> None:
        """Ask for a background summary when the thread is due one (over its budget by
        a step); a failure to ask is logged, never a failure of the checkpoint."""
        trigger = self._summary_trigger
        if trigger is None:
            return
        try:
            summaries = SummaryStore(self.threads(tenant).storage)
            await trigger.checkpointed(tenant, thread, list(state.messages), summaries)
        except Exception:
            log.exception("could not schedule a summary of a thread of tenant %s", tenant)

    @staticmethod
    async def _write(
        threads: DeltaCheckpointer, thread: str, checkpoint_id: str, state: AgentState
    ) -> None:
        """Save once: a redelivery after a crash finds the checkpoint already there."""
        if await threads.get_metadata(thread, checkpoint_id) is None:
            await threads.save(state, thread, checkpoint_id)

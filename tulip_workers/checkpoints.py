"""Apply one ``checkpoint.saved`` event: write the state to the checkpoint store, in
order per thread, exactly once, then trim the thread's pending list.

A delta event (:mod:`tulip_wire.statedelta`) is applied onto its own base checkpoint,
as the store has it, and checked against the digest it carries; when the store lacks
the base or holds a state that does not match (a lost or dead-lettered save, another
producer's history), the state is rebuilt from the thread's pending list instead, and
when that cannot rebuild it either the event is dead-lettered with a reason naming the
base: never a delta applied onto another state.

Thread state is keyed by (tenant, thread id): the event's payload names both, its key is
made of both (checked on decode and after a claim-check fetch), and the state is written
through the tenant's view of the store. Idempotent by checkpoint id (a redelivery finds
the checkpoint already stored and the ledger row already written). An event older than
one already applied for its thread is recorded but not written (outcome ``superseded``,
never ``applied``): an older checkpoint never becomes the head. The pending list is
trimmed (this checkpoint and older saves) only after the store has the state; newer
saves stay.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.known import MESSAGES
from tulip_memory.delta.tenants import TenantCheckpointers
from tulip_memory.state import AgentState
from tulip_memory.summaries import SummaryBudget, SummaryStore
from tulip_wire.events import (
    CHECKPOINT_SAVED,
    THREAD_FORGET,
    Envelope,
    EventError,
    check_messages,
)
from tulip_wire.pending import PendingStates, rebuild
from tulip_wire.statedelta import DeltaError, apply_delta, onto_known
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

    async def _apply(self, env: Envelope, attempt: int, ahead: object | None = None) -> str:
        if env.type == THREAD_FORGET:
            return await self._forget(env, attempt)
        if env.type != CHECKPOINT_SAVED:
            raise EventError(f"a {env.type} event on a checkpoint queue", env.id)
        payload = await self._payload(env)
        tenant, thread = payload["tenant"], payload["thread_id"]
        checkpoint_id = payload["checkpoint_id"]
        state: AgentState | None = None
        dropped = superseded = False
        try:
            # One transaction around the write: it holds the tenant's erase lock
            # shared, so an erase of the thread or tenant never misses what it writes.
            async with self.store.transaction(tenant) as tx:
                dropped = await self._fenced(tx.conn, env, tenant)
                if not dropped:
                    newest = await self.ledger.newest_applied_seq(
                        tx.conn, env.type, env.key, tenant=tenant
                    )
                    superseded = newest is not None and env.seq is not None and env.seq < newest
                    if not superseded:
                        state = await self._write(env, payload)
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
        if dropped:
            await self._drop_claim(env)
            superseded = True
        if self.pending is not None:
            await asyncio.to_thread(self.pending.clear_if, tenant, thread, checkpoint_id)
        if state is not None:
            await self._maybe_summarize(tenant, thread, state)
        return SUPERSEDED if superseded else APPLIED

    async def _write(self, env: Envelope, payload: dict[str, Any]) -> AgentState | None:
        """Save once: a redelivery after a crash finds the checkpoint already there
        (and returns its state). A delta is applied only onto its own base."""
        tenant, thread = payload["tenant"], payload["thread_id"]
        checkpoint_id = payload["checkpoint_id"]
        threads = self.threads(tenant)
        delta = payload.get("delta")
        if delta is not None:
            state = await self._onto_written(threads, thread, checkpoint_id, delta)
            if state is not None:
                return state
        if await threads.get_metadata(thread, checkpoint_id) is not None:
            return await threads.load(thread, checkpoint_id)
        data = payload.get("state")
        if data is None:
            data = await self._resolve(env, tenant, thread, checkpoint_id, payload["delta"])
            # A whole state was checked on decode; one a delta made, here.
            check_messages(data.get(MESSAGES), "the delta's state.messages", env.id)
        try:
            state = AgentState.from_checkpoint(data)
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise EventError(f"the delta's state is not an agent state: {e}", env.id) from e
        await threads.save(state, thread, checkpoint_id)
        return state

    async def _onto_written(
        self, threads: DeltaCheckpointer, thread: str, checkpoint_id: str, delta: dict[str, Any]
    ) -> AgentState | None:
        """The common save, at the cost of its change: the delta appends to the state
        this process wrote last for the thread (its checkpointer's latest cache, with
        the head's version tag), whose checkpoint is the delta's base. The state is
        built onto the cached messages themselves (so the store encodes only the new
        ones) and saved only while the stored head is still the one written, with
        the digest the producer sent; None (nothing written) otherwise, and the
        reading path below decides."""
        written = threads.latest_cache.written(thread)
        if written is None or written.known is None or written.manifest is None:
            return None
        if written.manifest.latest is None or written.manifest.latest[1] != delta["base"]:
            return None
        latest = written.state
        fields = {**latest.values, **{k: f.items for k, f in latest.lists.items() if k != MESSAGES}}
        state = onto_known(written.known.messages, fields, delta["patch"])
        if state is None:
            return None
        saved = await threads.save_onto_written(
            state, thread, checkpoint_id, base=delta["base"], digest=delta["digest"]
        )
        return state if saved else None

    async def _resolve(
        self, env: Envelope, tenant: str, thread: str, checkpoint_id: str, delta: dict[str, Any]
    ) -> dict[str, Any]:
        """The state a delta makes: onto its base as the checkpoint store has it, else
        rebuilt from the thread's pending list (a base the store lacks or holds
        otherwise: a lost or dead-lettered save). Neither: an :class:`EventError`
        naming the base, never a state merged onto another base."""
        base_id = delta["base"]
        problem = f"its base checkpoint {base_id} is not in the checkpoint store"
        base = await self.threads(tenant).load(thread, base_id)
        if base is not None:
            try:
                data = await asyncio.to_thread(
                    apply_delta, base.to_checkpoint(), delta["patch"], delta["digest"], base_id
                )
                return data
            except DeltaError as e:
                problem = str(e)
        rebuilt = await self._from_pending(tenant, thread, checkpoint_id, delta["digest"])
        if rebuilt is not None:
            log.warning(
                "checkpoint %s of a thread of tenant %s rebuilt from the pending list: %s",
                checkpoint_id,
                tenant,
                problem,
            )
            return rebuilt
        raise EventError(
            f"delta not applied: {problem}, and the pending list does not rebuild it",
            env.id,
        )

    async def _from_pending(
        self, tenant: str, thread: str, checkpoint_id: str, digest: str
    ) -> dict[str, Any] | None:
        if self.pending is None:
            return None
        chain = await asyncio.to_thread(self.pending.chain, tenant, thread, checkpoint_id)
        if chain is None or chain.steps[-1].digest != digest:
            return None
        root: dict[str, Any] | None = None
        if chain.root is not None:
            stored = await self.threads(tenant).load(thread, chain.root)
            if stored is None:
                return None
            root = stored.to_checkpoint()
        try:
            return await asyncio.to_thread(rebuild, chain, root)
        except DeltaError as e:
            log.warning("pending list of checkpoint %s does not rebuild it: %s", checkpoint_id, e)
            return None

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

"""Background summarization of long threads (the ``memory.summarize`` queue).

The checkpoint worker asks for a summary when a thread it just wrote is over its
token budget and a step of it is not yet summarized (:class:`SummaryTrigger`,
:class:`~tulip_memory.summaries.SummaryBudget`); at most one job per (tenant, thread) is
pending (a Redis key set with NX). The
job extends the thread's stored summary with the turns it does not cover yet — the
middle of the thread, between the anchor and the newest messages — through
``TULIP_SUMMARY_MODEL`` (holding a slot of the LLM semaphore) or the extractive
offline fallback, and stores it next to the checkpoints, in the thread's tenant. A
failing summarizer changes nothing: the thread stays loadable and the next checkpoint asks again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.tenants import TenantCheckpointers
from tulip_memory.messages import Message
from tulip_memory.summaries import SummaryBudget, SummaryStore
from tulip_memory.summarize import Summary, extend_summary
from tulip_wire.events import thread_key
from tulip_wire.topology import SUMMARY_PENDING_PREFIX
from tulip_workers.extractors import SlotFactory

log = logging.getLogger(__name__)


class SummaryScheduler:
    """At most one pending summary job per (tenant, thread)."""

    def __init__(self, client: Any, send: Callable[[str, str], None], ttl: float = 900.0) -> None:
        self._client = client
        self._send = send
        self._ttl_ms = int(ttl * 1000)

    def maybe_schedule(self, tenant: str, thread_id: str) -> bool:
        """Enqueue a job unless one is pending; True when one was enqueued."""
        key = _pending_key(tenant, thread_id)
        if not self._client.set(key, "1", nx=True, px=self._ttl_ms):
            return False
        try:
            self._send(tenant, thread_id)
        except Exception:
            self._client.delete(key)
            raise
        return True

    def pending(self, tenant: str, thread_id: str) -> bool:
        """Whether a job for ``tenant``'s thread is pending."""
        return bool(self._client.exists(_pending_key(tenant, thread_id)))

    def done(self, tenant: str, thread_id: str) -> None:
        self._client.delete(_pending_key(tenant, thread_id))


def _pending_key(tenant: str, thread_id: str) -> str:
    return SUMMARY_PENDING_PREFIX + thread_key(tenant, thread_id)


#: Threads whose summary coverage a checkpoint worker remembers (an int and one
#: message each), least recently used first out.
MAX_REMEMBERED_THREADS = 10_000


class SummaryTrigger:
    """Per checkpoint: is the thread due a summary job under ``budget``? Then ask.

    What each thread's summary covers is remembered (its end, and the message just
    before it to notice history rewritten under it) for at most
    :data:`MAX_REMEMBERED_THREADS` threads, so most checkpoints decide from the state
    alone; the summary object is read only when the remembered coverage says a job
    is due and none is pending, which is about once per step.
    """

    def __init__(
        self,
        budget: SummaryBudget,
        scheduler: SummaryScheduler,
        max_threads: int = MAX_REMEMBERED_THREADS,
    ) -> None:
        self.budget = budget
        self.scheduler = scheduler
        self.max_threads = max_threads
        self._covered: OrderedDict[str, tuple[int, Message] | None] = OrderedDict()

    def _remembered(self, key: str, messages: list[Message]) -> int | None:
        known = self._covered.get(key)
        if known is None:
            return None
        end, boundary = known
        self._covered.move_to_end(key)
        return end if 0 < end <= len(messages) and messages[end - 1] == boundary else None

    def _remember(self, key: str, messages: list[Message], end: int | None) -> None:
        self._covered[key] = (end, messages[end - 1]) if end else None
        self._covered.move_to_end(key)
        while len(self._covered) > self.max_threads:
            self._covered.popitem(last=False)

    async def checkpointed(
        self, tenant: str, thread_id: str, messages: list[Message], summaries: SummaryStore
    ) -> bool:
        """Ask for a job if ``tenant``'s thread (its summaries in ``summaries``) is due
        one; True when one was enqueued."""
        key = thread_key(tenant, thread_id)
        if not self.budget.due(messages, self._remembered(key, messages)):
            return False
        if await asyncio.to_thread(self.scheduler.pending, tenant, thread_id):
            return False
        end = self.budget.covered_end(messages, await summaries.get(thread_id))
        self._remember(key, messages, end)
        if not self.budget.due(messages, end):
            return False
        return await asyncio.to_thread(self.scheduler.maybe_schedule, tenant, thread_id)


@dataclass(kw_only=True)
class SummaryWorker:
    checkpointer: DeltaCheckpointer
    model: str | None = None
    scheduler: SummaryScheduler | None = None
    head_turns: int = 2
    keep_recent: int = 10
    step_tokens: int = 1
    slot: SlotFactory | None = None
    _tenants: TenantCheckpointers | None = None

    def threads(self, tenant: str) -> DeltaCheckpointer:
        """``tenant``'s threads on the checkpoint store."""
        if self._tenants is None or self._tenants.base is not self.checkpointer:
            self._tenants = TenantCheckpointers(self.checkpointer)
        return self._tenants.of(tenant)

    async def run(self, tenant: str, thread_id: str, max_rounds: int = 5) -> str:
        """Bring ``tenant``'s thread's summary up to date; returns what it did.

        Checkpoints that arrive while this job runs do not schedule another (one job
        per thread), so the job looks again when it is done and extends the summary
        again while what it does not cover holds at least ``step_tokens`` (a bounded
        number of rounds)."""
        rounds = 0
        result = "missing"
        try:
            threads = self.threads(tenant)
            while rounds < max_rounds:
                result = await self._run(threads, thread_id, first=rounds == 0)
                if result != "summarized":
                    break
                rounds += 1
            return "summarized" if rounds else result
        finally:
            if self.scheduler is not None:
                self.scheduler.done(tenant, thread_id)

    async def _run(self, threads: DeltaCheckpointer, thread_id: str, *, first: bool) -> str:
        state = await threads.load(thread_id)
        if state is None:
            return "missing"
        messages = list(state.messages)
        budget = SummaryBudget(0, self.step_tokens, self.head_turns, self.keep_recent)
        wanted = budget.range(messages)
        if wanted.empty:
            return "nothing to summarize"
        summaries = SummaryStore(threads.storage)
        previous = await summaries.get(thread_id)
        if budget.covered_end(messages, previous) is None:
            previous = None  # history was rewritten under it: start over
        if previous is not None and previous.end >= wanted.end:
            return "up to date"
        if not first and not budget.due(messages, previous.end if previous else None):
            return "within a step"
        offset = previous.end if previous is not None else wanted.start
        summary = await self._extend(previous, messages[offset : wanted.end], wanted.start)
        await summaries.put(thread_id, summary)
        log.info("thread summarized: messages %d..%d", summary.start, summary.end)
        return "summarized"

    async def _extend(self, previous: Summary | None, new: list[Message], start: int) -> Summary:
        if self.model is None or self.slot is None:
            return await extend_summary(previous, new, model=self.model, start=start)
        async with self.slot():
            return await extend_summary(previous, new, model=self.model, start=start)

"""Background summarization of long threads (the ``memory.summarize`` queue).

The checkpoint worker asks for a summary when a thread it just wrote is over its
token budget and a step of it is not yet summarized (:class:`SummaryTrigger`,
:class:`~tulip_memory.summaries.SummaryBudget`); at most one job per (tenant, thread) is
pending (a Redis key set with NX, holding the job's random token). The job comes
through the broker, where anyone may send one: it runs only while its thread's marker
holds its token (so a stale or replayed job does nothing, and never clears the marker
of the job after it), and checks the budget itself before it reads or pays for
anything (``TULIP_SUMMARIZE_OVER_TOKENS``). The
job extends the thread's stored summary with the turns it does not cover yet — the
middle of the thread, between the anchor and the newest messages — through
``TULIP_SUMMARY_MODEL`` (holding a slot of the LLM semaphore) or the extractive
offline fallback, and stores it next to the checkpoints, in the thread's tenant. A
failing summarizer changes nothing: the thread stays loadable and the next checkpoint asks again.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tulip_memory.compactor import estimate_message_tokens
from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.tenants import TenantCheckpointers
from tulip_memory.messages import Message
from tulip_memory.summaries import SummaryBudget, SummaryStore
from tulip_memory.summarize import Summary, extend_summary
from tulip_wire.events import thread_key
from tulip_wire.scripts import lua
from tulip_wire.topology import summary_pending_key
from tulip_workers.extractors import SlotFactory

log = logging.getLogger(__name__)


#: Sends one job: ``send(tenant, thread_id, token)``.
SendJob = Callable[[str, str, str], None]


class SummaryScheduler:
    """At most one pending summary job per (tenant, thread), named by a token."""

    def __init__(self, client: Any, send: SendJob, ttl: float = 900.0) -> None:
        self._client = client
        self._send = send
        self._ttl_ms = int(ttl * 1000)
        self._done = client.register_script(lua(__file__, "summary_done.lua"))

    def maybe_schedule(self, tenant: str, thread_id: str) -> bool:
        """Enqueue a job unless one is pending; True when one was enqueued."""
        key = _pending_key(tenant, thread_id)
        token = secrets.token_hex(16)
        if not self._client.set(key, token, nx=True, px=self._ttl_ms):
            return False
        try:
            self._send(tenant, thread_id, token)
        except Exception:
            self.done(tenant, thread_id, token)
            raise
        return True

    def pending(self, tenant: str, thread_id: str) -> bool:
        """Whether a job for ``tenant``'s thread is pending."""
        return bool(self._client.exists(_pending_key(tenant, thread_id)))

    def holds(self, tenant: str, thread_id: str, token: str) -> bool:
        """Whether the thread's pending job is the one named ``token``."""
        found = self._client.get(_pending_key(tenant, thread_id))
        return found is not None and found.decode() == token

    def done(self, tenant: str, thread_id: str, token: str | None = None) -> None:
        """The job named ``token`` is over (a job without one: whichever is pending)."""
        key = _pending_key(tenant, thread_id)
        if token is None:
            self._client.delete(key)
        else:
            self._done(keys=[key], args=[token])


def summary_args(args: tuple[object, ...]) -> str | None:
    """Why a summary job's arguments are not run (``skipped: ...``, ``refused: ...``),
    or ``None``: a tenant, a thread id and (since jobs have them) the job's token."""
    if len(args) == 1:
        return "skipped: a job without a tenant"
    if len(args) not in (2, 3) or not all(isinstance(a, str) for a in args):
        return "refused: a summary job is (tenant, thread id, token), all strings"
    try:
        thread_key(str(args[0]), str(args[1]))
    except (TypeError, ValueError) as e:
        return f"refused: the tenant is not a namespace part ({type(e).__name__})"
    return None


def _pending_key(tenant: str, thread_id: str) -> str:
    return summary_pending_key(thread_key(tenant, thread_id))


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
    """Runs summary jobs. ``over_tokens`` (``TULIP_SUMMARIZE_OVER_TOKENS`` in a worker)
    and ``step_tokens`` are checked by every job itself, whoever sent it."""

    checkpointer: DeltaCheckpointer
    model: str | None = None
    scheduler: SummaryScheduler | None = None
    head_turns: int = 2
    keep_recent: int = 10
    step_tokens: int = 1
    over_tokens: int = 0
    slot: SlotFactory | None = None
    _tenants: TenantCheckpointers | None = None

    def threads(self, tenant: str) -> DeltaCheckpointer:
        """``tenant``'s threads on the checkpoint store."""
        if self._tenants is None or self._tenants.base is not self.checkpointer:
            self._tenants = TenantCheckpointers(self.checkpointer)
        return self._tenants.of(tenant)

    async def run(
        self, tenant: str, thread_id: str, token: str | None = None, max_rounds: int = 5
    ) -> str:
        """Bring ``tenant``'s thread's summary up to date; returns what it did.

        ``token`` names the job (:class:`SummaryScheduler`): with a scheduler, a job
        whose token the thread's marker does not hold is skipped (stale, or replayed).

        Checkpoints that arrive while this job runs do not schedule another (one job
        per thread), so the job looks again when it is done and extends the summary
        again while what it does not cover holds at least ``step_tokens`` (a bounded
        number of rounds)."""
        if self.scheduler is not None and token is not None:
            held = await asyncio.to_thread(self.scheduler.holds, tenant, thread_id, token)
            if not held:
                return "skipped: not the pending job of its thread (stale, or sent again)"
        rounds = 0
        result = "missing"
        try:
            threads = self.threads(tenant)
            while rounds < max_rounds:
                result = await self._run(threads, thread_id)
                if result != "summarized":
                    break
                rounds += 1
            return "summarized" if rounds else result
        finally:
            if self.scheduler is not None:
                self.scheduler.done(tenant, thread_id, token)

    async def _run(self, threads: DeltaCheckpointer, thread_id: str) -> str:
        state = await threads.load(thread_id)
        if state is None:
            return "missing"
        messages = list(state.messages)
        budget = SummaryBudget(
            self.over_tokens, self.step_tokens, self.head_turns, self.keep_recent
        )
        wanted = budget.range(messages)
        if wanted.empty:
            return "nothing to summarize"
        tokens = sum(estimate_message_tokens(m) for m in messages)
        if tokens <= self.over_tokens:
            return f"not due: {tokens} tokens, not over TULIP_SUMMARIZE_OVER_TOKENS"
        summaries = SummaryStore(threads.storage)
        previous = await summaries.get(thread_id)
        if budget.covered_end(messages, previous) is None:
            previous = None  # history was rewritten under it: start over
        if previous is not None and previous.end >= wanted.end:
            return "up to date"
        if not budget.due(messages, previous.end if previous else None):
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

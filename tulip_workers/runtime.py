"""Per-process resources of a worker, built once from the environment.

Celery task bodies are synchronous; the services are async. Each worker process owns
one :class:`~tulip_memory._portal.Portal` (an event loop thread) that its
connection pools live on, and every task runs its coroutine there.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from tulip_memory._portal import Portal
from tulip_memory.credentials import redact_url
from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.reindex import Reindexer
from tulip_wire.endpoints import redis_client
from tulip_wire.events import CHECKPOINT_SAVED, SESSION_ENDED
from tulip_wire.pending import PendingStates, pending_states
from tulip_wire.signing import Signer, signer_of
from tulip_wire.tasksig import task_kwargs
from tulip_wire.topology import (
    CHECKPOINT_QUEUE_PREFIX,
    EXTRACT_QUEUE_PREFIX,
    SUMMARIZE_QUEUE,
    SUMMARIZE_TASK,
)
from tulip_workers.checkpoints import CheckpointWorker
from tulip_workers.erasing import Eraser
from tulip_workers.event_worker import EventWorker
from tulip_workers.extraction import ExtractionWorker
from tulip_workers.extractors import Extractor, LLMStep, SlotFactory, heuristic
from tulip_workers.keyed import KeyOrder
from tulip_workers.retry import RetryPolicy
from tulip_workers.settings import WorkerSettings, pool_size
from tulip_workers.summarizer import SummaryScheduler, SummaryWorker
from tulip_workers.tally import DeadLetterTally, OutcomeTally

T = TypeVar("T")


class WorkerRuntime:
    def __init__(self, settings: WorkerSettings | None = None) -> None:
        self.settings = WorkerSettings.from_env() if settings is None else settings
        self.portal = Portal("tulip-worker")
        self._extraction: ExtractionWorker | None = None
        self._checkpoints: CheckpointWorker | None = None
        self._summaries: SummaryWorker | None = None
        self._reindexer: Reindexer | None = None
        self._lock = threading.Lock()
        self._orders = {
            event_type: KeyOrder(
                n,
                _is_live,
                functools.partial(_released, event_type),
                tenant_share=self.settings.tenant_share,
            )
            for event_type, n in self.settings.concurrency.items()
        }

    def order(self, event_type: str) -> KeyOrder:
        """The key-ordered gate of one event type's tasks in this process."""
        return self._orders[event_type]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.portal.call(coro)

    def extraction(self) -> ExtractionWorker:
        with self._lock:
            if self._extraction is None:
                s = self.settings
                store = s.store.store(pool_size=pool_size(s.concurrency[SESSION_ENDED]))
                claims = _claims(s)
                self._extraction = ExtractionWorker(
                    store=store,
                    extractor=_extractor(s),
                    claims=claims,
                    signer=_signer(s),
                    max_memories=s.max_memories,
                    eraser=Eraser(
                        store=store,
                        claims=claims,
                        checkpoints=checkpointer_of(s) if s.checkpoint_url else None,
                        redis=_redis(s),
                        batch=s.erase_batch,
                        pace=s.erase_pace,
                    ),
                    **_event_limits(s),
                )
            return self._extraction

    def checkpoints(self) -> CheckpointWorker:
        with self._lock:
            if self._checkpoints is None:
                s = self.settings
                store = s.store.store(pool_size=pool_size(s.concurrency[CHECKPOINT_SAVED]))
                claims = _claims(s)
                worker = CheckpointWorker(
                    store=store,
                    checkpointer=checkpointer_of(s),
                    pending=_pending(s),
                    claims=claims,
                    signer=_signer(s),
                    scheduler=_scheduler(s),
                    summary_budget=s.summary_budget,
                    **_event_limits(s),
                )
                worker.eraser = Eraser(
                    store=store,
                    claims=claims,
                    checkpoints=worker.checkpointer,
                    views=worker.threads,
                    redis=_redis(s),
                    batch=s.erase_batch,
                    pace=s.erase_pace,
                )
                self._checkpoints = worker
            return self._checkpoints

    def summaries(self) -> SummaryWorker:
        with self._lock:
            if self._summaries is None:
                s = self.settings
                model, budget = s.summary_model, s.summary_budget
                self._summaries = SummaryWorker(
                    checkpointer=checkpointer_of(s),
                    model=model,
                    scheduler=_scheduler(s),
                    head_turns=budget.head_turns,
                    keep_recent=budget.keep_recent,
                    step_tokens=budget.step_tokens,
                    over_tokens=budget.over_tokens,
                    slot=_llm_slot(s) if model else None,
                )
            return self._summaries

    def reindexer(self) -> Reindexer:
        with self._lock:
            if self._reindexer is None:
                # With an owner's DSN the worker running the last batch switches the
                # job; without one, the command watching it (or --resume) does.
                s = self.settings
                self._reindexer = Reindexer(s.store.store(), admin_dsn=s.database_admin_url)
            return self._reindexer


#: The event worker of each kind of shard queue (``<prefix>.<k>``).
_QUEUE_WORKERS = {
    f"{EXTRACT_QUEUE_PREFIX}.": WorkerRuntime.extraction,
    f"{CHECKPOINT_QUEUE_PREFIX}.": WorkerRuntime.checkpoints,
}


def event_worker_for(queue: object) -> Callable[[WorkerRuntime], EventWorker] | None:
    """How this process gets the event worker of shard queue ``queue`` (``None`` for
    any other queue)."""
    if not isinstance(queue, str):
        return None
    return next((w for prefix, w in _QUEUE_WORKERS.items() if queue.startswith(prefix)), None)


def _event_limits(s: WorkerSettings) -> dict[str, Any]:
    """What every ordered event worker is bounded by (attempts, body and claim sizes),
    and where it counts its dead letters and outcomes for the metrics (Redis, when
    there is one)."""
    url = s.redis_url
    client = None if url is None else redis_client(url)
    return {
        "tally": None if client is None else DeadLetterTally(client),
        "outcomes": None if client is None else OutcomeTally(client),
        "database": redact_url(s.store.require_database_url()),
        "retry": RetryPolicy(attempts=s.limits.attempts),
        "max_body_bytes": s.limits.max_body_bytes,
        "max_claim_bytes": s.limits.max_claim_bytes,
    }


def _signer(s: WorkerSettings) -> Signer | None:
    return signer_of(s.signing_key)


def _is_live(task_id: str) -> bool:
    """Whether this worker still holds ``task_id`` (reserved or running)."""
    from celery.worker import state

    return task_id in state.requests


def _released(event_type: str, key: str) -> None:
    """A task of ``key`` finished: its next parked message may come back."""
    from tulip_workers.parking import parking

    if (p := parking()) is not None:
        p.released(event_type, key)


def _llm_slot(s: WorkerSettings) -> SlotFactory:
    from tulip_workers.fairshare import serving
    from tulip_workers.semaphore import llm_semaphore

    sem = llm_semaphore(s.redis_url, s.llm, tenant_share=s.tenant_share)
    return lambda: sem.aslot(tenant=serving.get())


def _scheduler(s: WorkerSettings) -> SummaryScheduler | None:
    url = s.redis_url
    if url is None:
        return None
    signer = _signer(s)
    return SummaryScheduler(
        redis_client(url),
        lambda tenant, thread, token: send_summary_job(tenant, thread, token, signer),
    )


def send_summary_job(tenant: str, thread_id: str, token: str, signer: Signer | None) -> None:
    """One summary job of ``tenant``'s thread, named by ``token``, signed by ``signer``."""
    from tulip_workers.app import app

    args = [tenant, thread_id, token]
    app.send_task(
        SUMMARIZE_TASK,
        args=args,
        kwargs=task_kwargs(signer, SUMMARIZE_TASK, args),
        queue=SUMMARIZE_QUEUE,
        routing_key=SUMMARIZE_QUEUE,
        exchange="",
    )


def checkpointer_of(s: WorkerSettings) -> DeltaCheckpointer:
    """The checkpoint store of ``TULIP_CHECKPOINT_URL`` (s3://, file://, memory://)."""
    from tulip_memory.registry import get_checkpointer

    url = s.checkpoint_url
    if not url:
        raise ValueError("TULIP_CHECKPOINT_URL is not set: where thread checkpoints are stored")
    checkpointer = get_checkpointer(url)
    if not isinstance(checkpointer, DeltaCheckpointer):
        raise ValueError(
            f"TULIP_CHECKPOINT_URL={redact_url(url)!r} must name a checkpoint store, not an adapter"
        )
    return checkpointer


def _redis(s: WorkerSettings) -> Any:
    """A client of ``TULIP_REDIS_URL``, or None without one."""
    return None if s.redis_url is None else redis_client(s.redis_url)


def _pending(s: WorkerSettings) -> PendingStates | None:
    url = s.redis_url
    return None if url is None else pending_states(url, _signer(s))


def _claims(s: WorkerSettings) -> Any:
    """The producer's claim-check store: the same rule resolves the same root."""
    from tulip_wire.claimcheck import ClaimCheckStore

    return ClaimCheckStore.from_url(s.claim_check_url, endpoint_url=s.s3_endpoint_url)


def _extractor(s: WorkerSettings) -> Extractor:
    """The LLM extractor when ``TULIP_EXTRACT_MODEL`` is set, each call holding a slot
    of the cross-worker LLM semaphore; else the offline heuristic."""
    if s.extractor is None:
        return heuristic
    return LLMStep(s.extractor, _llm_slot(s))


_runtime: WorkerRuntime | None = None
_runtime_lock = threading.Lock()


def runtime() -> WorkerRuntime:
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = WorkerRuntime()
        return _runtime


def reset_after_fork() -> None:
    """A forked child must not reuse its parent's loop thread or pools."""
    global _runtime
    _runtime = None

"""Per-process resources of a worker, built once from the environment.

Celery task bodies are synchronous; the services are async. Each worker process owns
one :class:`~tulip_memory._portal.Portal` (an event loop thread) that its
connection pools live on, and every task runs its coroutine there.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from tulip_memory._portal import Portal
from tulip_memory.config import database_url, store_from_env
from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.extract import LLMExtractorConfig
from tulip_memory.reindex import Reindexer
from tulip_memory.summaries import SummaryBudget
from tulip_memory.summarize import summary_model_from_env
from tulip_wire.endpoints import redis_client
from tulip_wire.env import positive_int, redis_url
from tulip_wire.events import DEFAULT_MAX_CLAIM_BYTES, DEFAULT_MAX_EVENT_BYTES
from tulip_wire.pending import PendingStates, pending_states
from tulip_wire.redact import redact_url
from tulip_wire.signing import signer_from_env
from tulip_wire.topology import SUMMARIZE_QUEUE, SUMMARIZE_TASK
from tulip_workers.checkpoints import CheckpointWorker
from tulip_workers.extraction import ExtractionWorker
from tulip_workers.extractors import Extractor, LLMStep, SlotFactory, heuristic
from tulip_workers.keyed import CONCURRENCY_VARS, DEFAULT_CONCURRENCY, KeyOrder
from tulip_workers.retry import RetryPolicy
from tulip_workers.summarizer import SummaryScheduler, SummaryWorker
from tulip_workers.tally import DeadLetterTally

T = TypeVar("T")


class WorkerRuntime:
    def __init__(self) -> None:
        self.portal = Portal("tulip-worker")
        self._extraction: ExtractionWorker | None = None
        self._checkpoints: CheckpointWorker | None = None
        self._summaries: SummaryWorker | None = None
        self._reindexer: Reindexer | None = None
        self._lock = threading.Lock()
        self._orders = {
            event_type: KeyOrder(positive_int(var, DEFAULT_CONCURRENCY), _is_live)
            for event_type, var in CONCURRENCY_VARS.items()
        }

    def order(self, event_type: str) -> KeyOrder:
        """The key-ordered gate of one event type's tasks in this process."""
        return self._orders[event_type]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.portal.call(coro)

    def extraction(self) -> ExtractionWorker:
        with self._lock:
            if self._extraction is None:
                self._extraction = ExtractionWorker(
                    store=store_from_env(),
                    extractor=_extractor_from_env(),
                    claims=_claims_from_env(),
                    signer=signer_from_env(os.environ),
                    max_memories=positive_int("TULIP_MAX_MEMORIES", 50),
                    **_event_limits(),
                )
            return self._extraction

    def checkpoints(self) -> CheckpointWorker:
        with self._lock:
            if self._checkpoints is None:
                self._checkpoints = CheckpointWorker(
                    store=store_from_env(),
                    checkpointer=checkpointer_from_env(),
                    pending=_pending_from_env(),
                    claims=_claims_from_env(),
                    signer=signer_from_env(os.environ),
                    scheduler=_scheduler_from_env(),
                    summary_budget=summary_budget_from_env(),
                    **_event_limits(),
                )
            return self._checkpoints

    def summaries(self) -> SummaryWorker:
        with self._lock:
            if self._summaries is None:
                model = summary_model_from_env()
                budget = summary_budget_from_env()
                self._summaries = SummaryWorker(
                    checkpointer=checkpointer_from_env(),
                    model=model,
                    scheduler=_scheduler_from_env(),
                    head_turns=budget.head_turns,
                    keep_recent=budget.keep_recent,
                    step_tokens=budget.step_tokens,
                    slot=_llm_slot() if model else None,
                )
            return self._summaries

    def reindexer(self) -> Reindexer:
        with self._lock:
            if self._reindexer is None:
                # With an owner's DSN the worker running the last batch switches the
                # job; without one, the command watching it (or --resume) does.
                owner = os.environ.get("TULIP_DATABASE_ADMIN_URL") or None
                self._reindexer = Reindexer(store_from_env(), admin_dsn=owner)
            return self._reindexer


def _event_limits() -> dict[str, Any]:
    """What every ordered event worker is bounded by (attempts, body and claim sizes),
    and where it counts its dead letters for the metrics (Redis, when there is one)."""
    url = redis_url()
    return {
        "tally": None if url is None else DeadLetterTally(redis_client(url)),
        "database": redact_url(database_url()),
        "retry": RetryPolicy(attempts=positive_int("TULIP_EXTRACT_ATTEMPTS", 4)),
        "max_body_bytes": positive_int("TULIP_MAX_EVENT_BYTES", DEFAULT_MAX_EVENT_BYTES),
        "max_claim_bytes": positive_int("TULIP_MAX_CLAIM_BYTES", DEFAULT_MAX_CLAIM_BYTES),
    }


def _is_live(task_id: str) -> bool:
    """Whether this worker still holds ``task_id`` (reserved or running)."""
    from celery.worker import state

    return task_id in state.requests


def _llm_slot() -> SlotFactory:
    from tulip_workers.semaphore import semaphore_from_env

    sem = semaphore_from_env("llm")
    return lambda: sem.aslot()


def summary_budget_from_env() -> SummaryBudget:
    """``TULIP_SUMMARIZE_OVER_TOKENS`` (6000), ``TULIP_SUMMARY_STEP_TOKENS`` (a quarter
    of it), ``TULIP_SUMMARY_HEAD_TURNS`` (2), ``TULIP_SUMMARY_KEEP_RECENT`` (10)."""
    over = positive_int("TULIP_SUMMARIZE_OVER_TOKENS", 6000)
    return SummaryBudget(
        over_tokens=over,
        step_tokens=positive_int("TULIP_SUMMARY_STEP_TOKENS", max(1, over // 4)),
        head_turns=positive_int("TULIP_SUMMARY_HEAD_TURNS", 2),
        keep_recent=positive_int("TULIP_SUMMARY_KEEP_RECENT", 10),
    )


def _scheduler_from_env() -> SummaryScheduler | None:

    url = redis_url()
    if url is None:
        return None
    return SummaryScheduler(redis_client(url), send_summary_job)


def send_summary_job(tenant: str, thread_id: str) -> None:
    from tulip_workers.app import app

    app.send_task(
        SUMMARIZE_TASK,
        args=[tenant, thread_id],
        queue=SUMMARIZE_QUEUE,
        routing_key=SUMMARIZE_QUEUE,
        exchange="",
    )


def checkpointer_from_env() -> DeltaCheckpointer:
    """The checkpoint store of ``TULIP_CHECKPOINT_URL`` (s3://, file://, memory://)."""
    from tulip_memory.registry import get_checkpointer

    url = os.environ.get("TULIP_CHECKPOINT_URL", "")
    if not url:
        raise ValueError("TULIP_CHECKPOINT_URL is not set: where thread checkpoints are stored")
    checkpointer = get_checkpointer(url)
    if not isinstance(checkpointer, DeltaCheckpointer):
        raise ValueError(
            f"TULIP_CHECKPOINT_URL={redact_url(url)!r} must name a checkpoint store, not an adapter"
        )
    return checkpointer


def _pending_from_env() -> PendingStates | None:
    url = redis_url()
    return None if url is None else pending_states(url)


def _claims_from_env() -> Any:
    """The producer's claim-check store: the same rule resolves the same root."""
    from tulip_wire.claimcheck import ClaimCheckStore, claim_check_url_from_env

    endpoint = os.environ.get("TULIP_S3_ENDPOINT_URL") or None
    return ClaimCheckStore.from_url(claim_check_url_from_env(os.environ), endpoint_url=endpoint)


def _extractor_from_env() -> Extractor:
    """The LLM extractor when ``TULIP_EXTRACT_MODEL`` is set, each call holding a slot
    of the cross-worker LLM semaphore; else the offline heuristic."""
    config = LLMExtractorConfig.from_env()
    if config is None:
        return heuristic
    return LLMStep(config, _llm_slot())


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

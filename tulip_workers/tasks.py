"""Celery task bodies: decode nothing, decide nothing; call the services.

An ordered task whose event became a dead letter raises :class:`DeadLettered` after
the letter and its ledger row are committed: Celery acks the message and records the
task as FAILURE, so Flower's Failed view (and its task page) shows every dead letter,
in the same state the ledger holds. The exception says the reason's class, length and
hash, the queue and the event and tenant (:func:`~tulip_workers.outcomes.dead_letter_summary`):
Celery logs it and Flower shows it, so it never holds the reason itself, which may
quote the conversation or the model's answer (that stays in the tenant's dead letter).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

from celery.signals import task_received, worker_process_init

from tulip_memory.redaction import redact
from tulip_wire.events import CHECKPOINT_SAVED, SESSION_ENDED, TASKS, tenant_of_key
from tulip_wire.signing import Signer, signer_of
from tulip_wire.tasksig import task_refusal
from tulip_wire.topology import REINDEX_TASK, SUMMARIZE_TASK
from tulip_workers import fencing
from tulip_workers.app import app
from tulip_workers.event_worker import DEAD, EventWorker
from tulip_workers.fairshare import for_tenant
from tulip_workers.keyed import envelope_key
from tulip_workers.outcomes import dead_letter_summary
from tulip_workers.redelivery import deaths, running
from tulip_workers.reindexing import REINDEX_RETRIES, batch_args
from tulip_workers.retry import describe
from tulip_workers.runtime import WorkerRuntime, reset_after_fork, runtime
from tulip_workers.summarizer import summary_args

log = logging.getLogger(__name__)

#: Ordered event types by task name.
ORDERED = {TASKS[SESSION_ENDED]: SESSION_ENDED, TASKS[CHECKPOINT_SAVED]: CHECKPOINT_SAVED}


class DeadLettered(Exception):
    """The event is a dead letter (committed): its redacted summary."""


class Redacted(Exception):
    """A failure as Celery logs it and Flower shows it: its class, length and hash."""


@app.task(name=TASKS[SESSION_ENDED], bind=True, throws=(DeadLettered,))  # type: ignore[untyped-decorator]
def extract(self: Any, *args: Any, **kwargs: Any) -> str:
    """Apply one ``session.ended`` event (ordered per namespace, many keys at once)."""
    return _ordered(self, SESSION_ENDED, WorkerRuntime.extraction, args, kwargs)


@app.task(name=TASKS[CHECKPOINT_SAVED], bind=True, throws=(DeadLettered,))  # type: ignore[untyped-decorator]
def checkpoint(self: Any, *args: Any, **kwargs: Any) -> str:
    """Write one thread checkpoint (ordered per thread, many threads at once)."""
    return _ordered(self, CHECKPOINT_SAVED, WorkerRuntime.checkpoints, args, kwargs)


def _ordered(
    task: Any,
    event_type: str,
    worker: Callable[[WorkerRuntime], EventWorker],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str:
    """One event through its worker. The body is the one argument a producer sends;
    a message of any other shape is kept whole, to be dead-lettered as it came."""
    rt = runtime()
    request = task.request
    info = request.delivery_info or {}
    body: object = args[0] if len(args) == 1 and not kwargs else {"args": args, "kwargs": kwargs}
    redelivered = bool(info.get("redelivered")) and request.id is not None
    died = _deaths(request.id) if redelivered else 0
    killed = f"killed its worker {died} times" if died >= _max_deaths() else None
    task_id = request.id or uuid.uuid4().hex  # an eager call has none: no order to keep
    queue = info.get("routing_key")
    key = envelope_key(body, task_id)
    # A message that was running when a worker died runs alone: a second death is its own.
    with rt.order(event_type).turn(task_id, key, exclusive=died > 0):
        # A paused owner woken past its lease runs nothing more before it is renewed
        # (or, taken over, the process ends).
        fencing.await_valid()
        with running(queue, task_id, rt.settings.redis_url):
            coro = worker(rt).handle_durably(body, request.id, queue, killed=killed)
            outcome = rt.run(for_tenant(tenant_of_key(key), coro))
    if outcome.outcome == DEAD:
        where = queue if isinstance(queue, str) else None
        # The traceback of the attempt that failed (its frames: code, never values), so
        # Celery's log and Flower show where, not only this wrapper.
        raise DeadLettered(
            dead_letter_summary(
                outcome.reason or "dead letter", event_id=outcome.event_id, key=outcome.key,
                where=where, attempts=outcome.attempt,
            )
        ).with_traceback(outcome.traceback)  # fmt: skip
    return outcome.outcome


def _max_deaths() -> int:
    """A message whose workers died this many times is dead-lettered, not run again."""
    return runtime().settings.limits.max_worker_deaths


def _deaths(task_id: str) -> int:
    """How many workers died running this message (0 when the broker cannot say)."""
    try:
        return deaths(task_id, runtime().settings.redis_url)
    except Exception:  # the broker just went away: run it; the next restore counts on
        log.warning("could not read the death count of %s", task_id, exc_info=True)
        return 0


@app.task(name=SUMMARIZE_TASK, bind=True)  # type: ignore[untyped-decorator]
def summarize(self: Any, *args: Any, sig: Any = None) -> str:
    """Bring one tenant's thread's background summary up to date (pooled, unordered):
    ``(tenant, thread_id, token)``, signed when signing is on. A job queued before
    thread state had a tenant (one argument) is skipped: the thread's next checkpoint
    asks again; one before jobs had tokens (two) runs unless signing is on."""
    refused = _refusal(self, SUMMARIZE_TASK, args, sig) or summary_args(args)
    if refused is not None:
        return refused
    rt = runtime()
    try:
        return rt.run(for_tenant(str(args[0]), rt.summaries().run(*args)))
    except Exception as e:  # the thread stays loadable; its next checkpoint asks again
        failed = redact(describe(e))  # a model's error text may echo the thread
        log.warning("summary job %s failed: %s", self.request.id, failed)
        return f"failed: {failed}"


@app.task(name=REINDEX_TASK, bind=True, max_retries=REINDEX_RETRIES)  # type: ignore[untyped-decorator]
def reindex(self: Any, job_id: Any, range_id: Any, tenant: Any = None, sig: Any = None) -> str:
    """Embed and write one keyset range of a reindex job (pooled, unordered), pinned
    to the range's tenant the task names (a range of another tenant is not found). A
    failure other than the model's (which pauses the job itself) is retried with
    backoff; the last one pauses the job with its error, so none goes unnoticed."""
    args = (job_id, range_id) if tenant is None else (job_id, range_id, tenant)
    refused = _refusal(self, REINDEX_TASK, args, sig)
    if refused is not None:
        return refused
    refused = batch_args(job_id, range_id, tenant)
    if refused is not None:
        log.warning("reindex batch refused: %s", refused)  # stale, or forged
        return f"refused: {refused}"
    rt = runtime()
    try:
        return rt.run(rt.reindexer().run_batch(job_id, range_id, tenant))
    except Exception as e:
        tries = self.request.retries + 1
        # Celery logs the exception and Flower shows it: its class, length and hash only
        # (a database's or a model's error text may quote the rows); the job keeps it whole.
        shown = Redacted(redact(describe(e)))
        if tries > REINDEX_RETRIES:
            reason = f"range {range_id} failed {tries} times: {type(e).__name__}: {e}"
            rt.run(rt.reindexer().pause(job_id, reason, tenant=tenant))
            raise shown from None
        raise self.retry(exc=shown, countdown=min(30, 2**tries)) from None


def _refusal(task: Any, name: str, args: tuple[Any, ...], sig: Any) -> str | None:
    """``refused: <reason>`` for a task this worker must not run unsigned (logged with
    the task's id, never its arguments), else None."""
    reason = task_refusal(_signer(), name, args, sig)
    if reason is None:
        return None
    log.warning("task %s refused: %s", task.request.id, reason)
    return f"refused: {reason}"


def _signer() -> Signer | None:
    return signer_of(runtime().settings.signing_key)


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _fresh_runtime(**_: Any) -> None:
    reset_after_fork()


#: What a producer's own message says of its args (:func:`tulip_producer.direct.argsrepr`).
_OWN_ARGSREPR = re.compile(
    r"\[<(?:session\.ended|checkpoint\.saved) ([0-9a-f]{32}) seq=(?:\d+|None)>\]"
)


@task_received.connect  # type: ignore[untyped-decorator]
def _withhold_event_args(request: Any = None, **_: Any) -> None:
    """Flower and task events show what a message's headers say of its args
    (``argsrepr``), and a client other than our producer writes its own there: the
    conversation, for a body sent with Celery's defaults. An ordered task's is kept
    only in the producer's form, naming this task's id; else it is withheld."""
    event_type = ORDERED.get(getattr(request, "name", ""))
    if event_type is None:
        return
    own = _OWN_ARGSREPR.fullmatch(str(getattr(request, "_argsrepr", "")))
    if own is None or own.group(1) != request.id:
        request._argsrepr = f"[<{event_type} {request.id}: args not shown>]"
    request._kwargsrepr = "{}"


@task_received.connect  # type: ignore[untyped-decorator]
def _admit_in_delivery_order(request: Any = None, **_: Any) -> None:
    """On the consumer thread, in queue order: each ordered task joins its key's FIFO
    before any pool thread can start it (see :mod:`tulip_workers.keyed`)."""
    event_type = ORDERED.get(getattr(request, "name", ""))
    if event_type is None:
        return
    args = request.args or [None]
    runtime().order(event_type).admit(request.id, envelope_key(args[0], request.id))

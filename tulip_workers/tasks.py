"""Celery task bodies: decode nothing, decide nothing; call the services."""

from __future__ import annotations

from typing import Any

from celery.signals import worker_process_init

from tulip_wire.events import CHECKPOINT_SAVED, SESSION_ENDED, TASKS
from tulip_wire.topology import REINDEX_TASK, SUMMARIZE_TASK
from tulip_workers.app import app
from tulip_workers.reindexing import REINDEX_RETRIES
from tulip_workers.runtime import reset_after_fork, runtime


@app.task(name=TASKS[SESSION_ENDED], bind=True)  # type: ignore[untyped-decorator]
def extract(self: Any, body: str) -> str:
    """Apply one ``session.ended`` event (ordered shard queue, solo worker)."""
    rt = runtime()
    queue = (self.request.delivery_info or {}).get("routing_key")
    return rt.run(rt.extraction().handle_durably(body, self.request.id, queue))


@app.task(name=TASKS[CHECKPOINT_SAVED], bind=True)  # type: ignore[untyped-decorator]
def checkpoint(self: Any, body: str) -> str:
    """Write one thread checkpoint (ordered shard queue, solo worker)."""
    rt = runtime()
    queue = (self.request.delivery_info or {}).get("routing_key")
    return rt.run(rt.checkpoints().handle_durably(body, self.request.id, queue))


@app.task(name=SUMMARIZE_TASK)  # type: ignore[untyped-decorator]
def summarize(tenant: str, thread_id: str | None = None) -> str:
    """Bring one tenant's thread's background summary up to date (pooled, unordered).
    A job queued before thread state had a tenant (one argument) is skipped: the
    thread's next checkpoint asks again."""
    if thread_id is None:
        return "skipped: a job without a tenant"
    rt = runtime()
    return rt.run(rt.summaries().run(tenant, thread_id))


@app.task(name=REINDEX_TASK, bind=True, max_retries=REINDEX_RETRIES)  # type: ignore[untyped-decorator]
def reindex(self: Any, job_id: int, range_id: int) -> str:
    """Embed and write one keyset range of a reindex job (pooled, unordered). A
    failure other than the model's (which pauses the job itself) is retried with
    backoff; the last one pauses the job with its error, so none goes unnoticed."""
    rt = runtime()
    try:
        return rt.run(rt.reindexer().run_batch(job_id, range_id))
    except Exception as e:
        tries = self.request.retries + 1
        if tries > REINDEX_RETRIES:
            reason = f"range {range_id} failed {tries} times: {type(e).__name__}: {e}"
            rt.run(rt.reindexer().pause(job_id, reason))
            raise
        raise self.retry(exc=e, countdown=min(30, 2**tries)) from e


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _fresh_runtime(**_: Any) -> None:
    reset_after_fork()

"""Celery task bodies: decode nothing, decide nothing; call the services."""

from __future__ import annotations

from typing import Any

from celery.signals import worker_process_init

from producer.events import CHECKPOINT_SAVED, SESSION_ENDED, TASKS
from workers.app import app
from workers.reindexing import REINDEX_TASK
from workers.runtime import SUMMARIZE_TASK, reset_after_fork, runtime


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
def summarize(thread_id: str) -> str:
    """Bring one thread's background summary up to date (pooled, unordered)."""
    rt = runtime()
    return rt.run(rt.summaries().run(thread_id))


@app.task(name=REINDEX_TASK)  # type: ignore[untyped-decorator]
def reindex(job_id: int, range_id: int) -> str:
    """Embed and write one keyset range of a reindex job (pooled, unordered)."""
    rt = runtime()
    return rt.run(rt.reindexer().run_batch(job_id, range_id))


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _fresh_runtime(**_: Any) -> None:
    reset_after_fork()

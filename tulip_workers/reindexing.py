"""The reindex batch task's name and queue, and how a coordinator sends one batch.

Batches run on ``memory.reindex`` with workers of their own (``tulip-memory worker
reindex``), so live extraction is never queued behind a reindex."""

from __future__ import annotations

from tulip_wire.topology import REINDEX_QUEUE, REINDEX_TASK

#: Retries of a batch failing for a reason other than its model (a database blip).
REINDEX_RETRIES = 5


def send_reindex_batch(job_id: int, range_id: int) -> None:
    from tulip_workers.app import app

    app.send_task(
        REINDEX_TASK,
        args=[job_id, range_id],
        queue=REINDEX_QUEUE,
        routing_key=REINDEX_QUEUE,
        exchange="",
    )

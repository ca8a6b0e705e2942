"""The reindex batch task's name and queue, and how a coordinator sends one batch.

Batches run on ``memory.reindex`` with workers of their own (``tulip-memory worker
reindex``), so live extraction is never queued behind a reindex."""

from __future__ import annotations

from collections.abc import Callable

from tulip_wire.signing import Signer
from tulip_wire.tasksig import task_kwargs
from tulip_wire.topology import REINDEX_QUEUE, REINDEX_TASK

#: Retries of a batch failing for a reason other than its model (a database blip).
REINDEX_RETRIES = 5


def batch_args(job_id: object, range_id: object, tenant: object) -> str | None:
    """Why a batch task's arguments are refused (anything from the broker may be
    forged), or ``None``: a job id, a range id and the range's tenant."""
    if tenant is None:
        return "a batch without its tenant (queued before batches carried one): `--resume` sends it"
    ids = ((job_id, 1), (range_id, 0))  # jobs count from 1, a job's ranges from 0
    if not all(
        isinstance(i, int) and not isinstance(i, bool) and low <= i < 2**31 for i, low in ids
    ):
        return "the job id must be a positive integer, the range id one from 0"
    if not isinstance(tenant, str) or not tenant or len(tenant) > 256:
        return "the tenant must be a non-empty string"
    return None


def send_reindex_batch(
    job_id: int, range_id: int, tenant: str, signer: Signer | None = None
) -> None:
    """One batch: the range, and the tenant the worker pins before it reads anything
    (a range of another tenant is then not found); signed by ``signer`` if given."""
    from tulip_workers.app import app

    args = [job_id, range_id, tenant]
    app.send_task(
        REINDEX_TASK,
        args=args,
        kwargs=task_kwargs(signer, REINDEX_TASK, args),
        queue=REINDEX_QUEUE,
        routing_key=REINDEX_QUEUE,
        exchange="",
    )


def batch_sender(signer: Signer | None) -> Callable[[int, int, str], None]:
    """:func:`send_reindex_batch` signing with ``signer`` (``TULIP_EVENT_SIGNING_KEY``):
    what a coordinator hands the reindexer."""
    return lambda job_id, range_id, tenant: send_reindex_batch(job_id, range_id, tenant, signer)

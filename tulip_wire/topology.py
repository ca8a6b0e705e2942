"""The names of the wire, in one place: exchange, queues, tasks and Redis key prefixes.

Everything that sends, consumes, restores, supervises or measures a queue reads its name
here; `tulip_wire.celeryconfig` declares exactly :func:`declared_queues` (a test holds
them equal). Redis keys are built as ``<PREFIX><name>``; keys owned by kombu/Celery are
not listed (they are read from the transport at run time).
"""

from __future__ import annotations

from dataclasses import dataclass

EXCHANGE = "memory"

#: Ordered roles: shard queues ``<prefix>.<k>``, one consumer each.
EXTRACT_QUEUE_PREFIX = "memory.extract"
CHECKPOINT_QUEUE_PREFIX = "memory.checkpoint"
ORDERED_QUEUE_PREFIXES = (EXTRACT_QUEUE_PREFIX, CHECKPOINT_QUEUE_PREFIX)
#: Unordered roles: one queue each, pooled workers.
SUMMARIZE_QUEUE = "memory.summarize"
REINDEX_QUEUE = "memory.reindex"
# No dead-letter queue: dead letters live in Postgres (``tulip-memory dlq``), are FAILURE
# tasks in Flower and ``tulip_dead_letters`` in ``tulip-memory metrics``; a queue that
# nobody consumes would only grow.

#: Celery task names.
EXTRACT_TASK = "tulip.memory.extract"
CHECKPOINT_TASK = "tulip.memory.checkpoint"
SUMMARIZE_TASK = "tulip.thread.summarize"
REINDEX_TASK = "tulip.memory.reindex"

#: Redis key prefixes the project owns.
SEQ_KEY_PREFIX = "tulip:seq:"  # per-key event sequence numbers (producer)
PENDING_KEY_PREFIX = "tulip:pending-log:"  # read-your-writes thread saves (producer, workers)
SUMMARY_PENDING_PREFIX = "tulip:summarize:"  # one summary job per thread in flight
SEMAPHORE_PREFIX = "tulip:sem:"  # counting semaphores (one sorted set of leases each)
DEATHS_PREFIX = "tulip:deaths:"  # per task id: its runs that never ended (worker deaths)
DELIVERING_PREFIX = "tulip:delivering:"  # per shard queue: a message popped, not yet unacked
DEAD_LETTER_TALLY_KEY = "tulip:deadletters"  # hash: dead letters per reason class
SPOOL_REPORT_PREFIX = "tulip:spool:"  # per producer: its spool depth, reported with a TTL
SHARDS_KEY_PREFIX = "tulip:shards:"  # per ordered role: the shard count producers route by


def shard_queue(prefix: str, shard: int) -> str:
    """The name of shard ``shard`` of an ordered role."""
    return f"{prefix}.{shard}"


def is_ordered_queue(name: str) -> bool:
    """A shard queue of an ordered role (``memory.extract.3``)."""
    return name.startswith(tuple(f"{p}." for p in ORDERED_QUEUE_PREFIXES))


def shard_queues(prefix: str, shards: int) -> list[str]:
    return [shard_queue(prefix, k) for k in range(shards)]


@dataclass(frozen=True)
class QueueSpec:
    """A queue the workers consume; ``ordered`` queues get one active consumer."""

    name: str
    ordered: bool


def declared_queues(extract_shards: int, checkpoint_shards: int) -> list[QueueSpec]:
    """Every queue of the deployment, in declaration order."""
    return [
        *[QueueSpec(q, True) for q in shard_queues(EXTRACT_QUEUE_PREFIX, extract_shards)],
        *[QueueSpec(q, True) for q in shard_queues(CHECKPOINT_QUEUE_PREFIX, checkpoint_shards)],
        QueueSpec(SUMMARIZE_QUEUE, False),
        QueueSpec(REINDEX_QUEUE, False),
    ]

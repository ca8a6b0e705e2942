"""The names of the wire, in one place: exchange, queues, tasks and Redis key prefixes.

Everything that sends, consumes, restores, supervises or measures a queue reads its name
here; `tulip_wire.celeryconfig` declares exactly :func:`declared_queues` (a test holds
them equal). Redis keys are built as ``<PREFIX><name>``; keys owned by kombu/Celery are
not listed (they are read from the transport at run time).
"""

from __future__ import annotations

import hashlib
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
OUTCOME_TALLY_KEY = "tulip:outcomes"  # hash: events done per queue and outcome
LATENCY_TALLY_KEY = "tulip:latency"  # hash: publish-to-done seconds per queue, by bucket
SPOOL_REPORT_PREFIX = "tulip:spool:"  # per producer: its spool depth, reported with a TTL
SHARDS_KEY_PREFIX = "tulip:shards:"  # per ordered role: the shard count producers route by
PARKED_KEY_PREFIX = "tulip:parked:"  # per shard queue and key: that key's parked messages
PARKED_INDEX_PREFIX = "tulip:parked-keys:"  # per shard queue: parked keys -> how many parked
UNPARKING_PREFIX = "tulip:unparking:"  # per shard queue: key -> digest of its unparked message
QUOTA_KEY_PREFIX = "tulip:quota:"  # per tenant: its publish token bucket
FAIR_KEY_PREFIX = "tulip:fair:"  # per semaphore: tenants waiting, and when each last asked
RETENTION_TALLY_KEY = "tulip:retention"  # hash: rows removed by retention per kind, last run
FORGETTING_PREFIX = "tulip:forgetting:"  # per tenant: its erase published, not yet done
LEASE_PREFIX = "tulip:lease:"  # per shard queue: its owner's lease (token, owner), expiring
FENCE_PREFIX = "tulip:fence:"  # per shard queue: the last fencing token given (never expires)
STANDBY_PREFIX = "tulip:standby:"  # per shard queue: standby workers -> until when (ms)
MEMBERS_PREFIX = "tulip:members:"  # per ordered role: claim-pool members -> until when (ms)

#: An ordering key (or tenant) longer than this many UTF-8 bytes is named by its digest
#: inside Redis key names, so a key name's size is bounded whatever the namespace.
MAX_NAMED_KEY_BYTES = 64
#: Starts a digest name; no ordering key starts with it (its tenant part is non-empty
#: and holds no separator), so a digest name never equals a key kept as it is.
DIGEST_MARK = "\x1f"


# --- Redis key names of per-key, per-thread and per-tenant state: one function per kind,
# --- the only places such a name is built (a subject's keys are found through them).


def redis_name(key: str) -> str:
    """``key`` as it appears inside Redis key names: itself when short, else the
    :data:`DIGEST_MARK` and a 128-bit digest of it."""
    raw = key.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_NAMED_KEY_BYTES:
        return key
    return DIGEST_MARK + hashlib.blake2b(raw, digest_size=16).hexdigest()


def seq_key(key: str) -> str:
    """The sequence counter of ordering key ``key`` (a namespace's or a thread's)."""
    return SEQ_KEY_PREFIX + redis_name(key)


def pending_key(thread_key: str) -> str:
    """The read-your-writes list of a thread (its ordering key, tenant first)."""
    return PENDING_KEY_PREFIX + redis_name(thread_key)


def summary_pending_key(thread_key: str) -> str:
    """The marker of a thread's summary job in flight."""
    return SUMMARY_PENDING_PREFIX + redis_name(thread_key)


def parked_key(queue: str, key: str) -> str:
    """The list of ordering key ``key``'s messages parked off shard queue ``queue``."""
    return f"{PARKED_KEY_PREFIX}{queue}:{redis_name(key)}"


def parked_index_key(queue: str) -> str:
    """The hash of ``queue``'s parked keys (ordering key -> messages parked)."""
    return PARKED_INDEX_PREFIX + queue


def unparking_key(queue: str) -> str:
    """The hash of ``queue``'s messages taken back from parking, not yet consumed."""
    return UNPARKING_PREFIX + queue


def lease_key(queue: str) -> str:
    """The lease of ``queue``'s owner (hash: ``token``, ``owner``; expires unless renewed)."""
    return LEASE_PREFIX + queue


def fence_key(queue: str) -> str:
    """The counter of ``queue``'s fencing tokens (one more at every takeover)."""
    return FENCE_PREFIX + queue


def standby_key(queue: str) -> str:
    """The sorted set of ``queue``'s standby workers (score: until when, ms)."""
    return STANDBY_PREFIX + queue


def members_key(role: str) -> str:
    """The sorted set of ``role``'s claim-pool members (score: until when, ms)."""
    return MEMBERS_PREFIX + role


def quota_key(tenant: str) -> str:
    """The publish token bucket of ``tenant``."""
    return QUOTA_KEY_PREFIX + redis_name(tenant)


def forgetting_key(tenant: str) -> str:
    """The marker of ``tenant``'s erase in flight (set before it is published)."""
    return FORGETTING_PREFIX + redis_name(tenant)


def fair_keys(semaphore: str) -> tuple[str, str]:
    """Semaphore ``semaphore``'s tenants waiting (sorted set: tenant -> since when) and
    tenants asking (sorted set: tenant -> when it last asked)."""
    return f"{FAIR_KEY_PREFIX}{semaphore}:waiting", f"{FAIR_KEY_PREFIX}{semaphore}:asking"


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

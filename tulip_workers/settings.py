"""Worker settings: typed, frozen, read from the environment once per process.

:class:`WorkerSettings` holds what every worker role reads (the extraction, checkpoint,
summary and reindex workers and the LLM semaphore): the shared variables of
:mod:`tulip_wire.env` and the library's, and the workers' own declared here. Building
it checks every value, so a malformed one fails when the process starts its first
task, naming the variable. What only some roles need (the database DSN, the
checkpoint store) is refused where it is missing when that role builds its store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from tulip_memory import env as lib
from tulip_memory.chat import CLIENTS, Client
from tulip_memory.config import StoreSettings
from tulip_memory.env import (
    Env,
    Var,
    environ,
    integer,
    niceness,
    one_of,
    positive,
    seconds,
    stripped,
    text_var,
)
from tulip_memory.extract import LLMExtractorConfig
from tulip_memory.store.postgres.store import DEFAULT_POOL_SIZE
from tulip_memory.summaries import SummaryBudget
from tulip_wire import env as wire
from tulip_wire.claimcheck import claim_check_url_from_env
from tulip_wire.events import CHECKPOINT_SAVED, DEFAULT_MAX_CLAIM_BYTES, SESSION_ENDED
from tulip_wire.signing import signer_of

DEFAULT_CONCURRENCY = 16
DEFAULT_LLM_MAX_INFLIGHT = 8
DEFAULT_LEASE_SECONDS = 60
DEFAULT_MAX_WORKER_DEATHS = 3

#: Events of each ordered type one process runs at once (across keys, each key in order).
CONCURRENCY = {
    SESSION_ENDED: Var("TULIP_EXTRACT_CONCURRENCY", DEFAULT_CONCURRENCY, positive),
    CHECKPOINT_SAVED: Var("TULIP_CHECKPOINT_CONCURRENCY", DEFAULT_CONCURRENCY, positive),
}


def pool_size(concurrency: int) -> int:
    """The database connections of a shard worker running ``concurrency`` events at
    once. An event holds a connection only for its reads before the model call and its
    write after it (a small part of its time), so half of C does, and never fewer than
    the store's default. Measured with ``bench.concurrency`` at C = 32, L = 1 s: the
    reads' and the write's p50 were 42 and 118 ms with 10 connections, 22 and 73 ms
    with 18, no better with 40."""
    return max(DEFAULT_POOL_SIZE, concurrency // 2 + 2)


def at_least_zero(raw: str) -> int:
    value = integer(raw)
    if value < 0:
        raise ValueError("must be an integer >= 0")
    return value


def share(raw: str) -> float:
    """A share of a cap: a number above 0 and at most 1."""
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("must be a share of the cap, above 0 and at most 1") from None
    if not 0 < value <= 1:
        raise ValueError("must be a share of the cap, above 0 and at most 1")
    return value


#: Messages of one key a shard worker holds in its reservation; the rest of the key's
#: backlog waits parked in Redis, in order (``tulip_workers.parking``); 0: no parking.
KEY_RESERVATION = Var("TULIP_KEY_RESERVATION", 2, at_least_zero)
#: How long a shard worker's lease on its queue lasts unless renewed (renewed every third
#: of it); a standby takes over at most this long after the owner died.
SHARD_LEASE_SECONDS = Var("TULIP_SHARD_LEASE_SECONDS", 10.0, seconds)
#: The share of a worker's slots and of the LLM cap one tenant may hold (unset: all).
TENANT_MAX_INFLIGHT = Var[float | None]("TULIP_TENANT_MAX_INFLIGHT", None, share)
MAX_MEMORIES = Var("TULIP_MAX_MEMORIES", 50, positive)
EXTRACT_ATTEMPTS = Var("TULIP_EXTRACT_ATTEMPTS", 4, positive)
MAX_CLAIM_BYTES = Var("TULIP_MAX_CLAIM_BYTES", DEFAULT_MAX_CLAIM_BYTES, positive)
MAX_WORKER_DEATHS = Var("TULIP_MAX_WORKER_DEATHS", DEFAULT_MAX_WORKER_DEATHS, positive)
LLM_MAX_INFLIGHT = Var("TULIP_LLM_MAX_INFLIGHT", DEFAULT_LLM_MAX_INFLIGHT, positive)
LLM_LEASE_SECONDS = Var("TULIP_LLM_LEASE_SECONDS", DEFAULT_LEASE_SECONDS, positive)
EXTRACT_MODEL = Var("TULIP_EXTRACT_MODEL", "", stripped)
EXTRACT_API_BASE = text_var("TULIP_EXTRACT_API_BASE")
EXTRACT_API_KEY = text_var("TULIP_EXTRACT_API_KEY", secret=True)
EXTRACT_TIMEOUT = Var("TULIP_EXTRACT_TIMEOUT", 30.0, seconds)
EXTRACT_CLIENT = Var("TULIP_EXTRACT_CLIENT", "auto", one_of(*CLIENTS))
SUMMARY_MODEL = Var("TULIP_SUMMARY_MODEL", "", stripped)
SUMMARIZE_OVER_TOKENS = Var("TULIP_SUMMARIZE_OVER_TOKENS", 6000, positive)
#: Default: a quarter of ``TULIP_SUMMARIZE_OVER_TOKENS``.
SUMMARY_STEP_TOKENS = Var[int | None]("TULIP_SUMMARY_STEP_TOKENS", None, positive)
SUMMARY_HEAD_TURNS = Var("TULIP_SUMMARY_HEAD_TURNS", 2, positive)
SUMMARY_KEEP_RECENT = Var("TULIP_SUMMARY_KEEP_RECENT", 10, positive)


def pace(raw: str) -> float:
    """A multiple of a batch's own time to rest after it: a number >= 0."""
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("must be a number >= 0") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError("must be a finite number >= 0")
    return value


#: Rows (or objects) one batch of an erase removes, and the rest after each batch as a
#: multiple of its time (``tulip_workers.erasing``): live recall keeps its share.
ERASE_BATCH = Var("TULIP_ERASE_BATCH", 2000, positive)
ERASE_PACE = Var("TULIP_ERASE_PACE", 1.0, pace)
#: Unset: ``tulip_workers.priority.BATCH_NICE`` for a worker of batch queues only, else 0.
WORKER_NICE = Var[int | None]("TULIP_WORKER_NICE", None, niceness)


@dataclass(frozen=True, kw_only=True)
class EventLimits:
    """What every ordered event worker is bounded by."""

    attempts: int = EXTRACT_ATTEMPTS.default
    max_body_bytes: int = wire.MAX_EVENT_BYTES.default
    max_claim_bytes: int = MAX_CLAIM_BYTES.default
    max_worker_deaths: int = DEFAULT_MAX_WORKER_DEATHS

    @classmethod
    def from_env(cls, env: Env | None = None) -> EventLimits:
        e = environ(env)
        return cls(
            attempts=EXTRACT_ATTEMPTS.read(e),
            max_body_bytes=wire.MAX_EVENT_BYTES.read(e),
            max_claim_bytes=MAX_CLAIM_BYTES.read(e),
            max_worker_deaths=MAX_WORKER_DEATHS.read(e),
        )


@dataclass(frozen=True, kw_only=True)
class LlmLimits:
    """The cross-worker LLM semaphore: slots in flight, and each lease's length."""

    max_inflight: int = DEFAULT_LLM_MAX_INFLIGHT
    lease_seconds: float = float(DEFAULT_LEASE_SECONDS)

    @classmethod
    def from_env(cls, env: Env | None = None) -> LlmLimits:
        e = environ(env)
        return cls(
            max_inflight=LLM_MAX_INFLIGHT.read(e), lease_seconds=float(LLM_LEASE_SECONDS.read(e))
        )


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    """Everything a worker process reads from the environment.

    ``redis_url`` is ``TULIP_REDIS_URL``, else a Redis ``TULIP_BROKER_URL``, else
    ``None`` (no dead-letter tally, pending overlay or summary scheduling);
    ``claim_check_url`` resolves by the rule producers share; ``extractor`` is ``None``
    without ``TULIP_EXTRACT_MODEL`` (the offline heuristic); ``summary_model`` is
    ``None`` without ``TULIP_SUMMARY_MODEL`` (extractive summaries).
    """

    store: StoreSettings = field(default_factory=StoreSettings)
    redis_url: str | None = None
    database_admin_url: str | None = field(default=None, repr=False)
    checkpoint_url: str = ""
    claim_check_url: str = ""
    s3_endpoint_url: str | None = None
    signing_key: str | None = field(default=None, repr=False)
    concurrency: Mapping[str, int] = field(
        default_factory=lambda: {t: v.default for t, v in CONCURRENCY.items()}
    )
    limits: EventLimits = field(default_factory=EventLimits)
    max_memories: int = MAX_MEMORIES.default
    extractor: LLMExtractorConfig | None = field(default=None, repr=False)
    summary_model: str | None = None
    summary_budget: SummaryBudget = field(default_factory=SummaryBudget)
    llm: LlmLimits = field(default_factory=LlmLimits)
    #: ``TULIP_KEY_RESERVATION``: one key's messages in a shard worker's reservation.
    key_reservation: int = KEY_RESERVATION.default
    #: ``TULIP_TENANT_MAX_INFLIGHT``: one tenant's share of the slots and the LLM cap.
    tenant_share: float | None = None
    #: ``TULIP_ERASE_BATCH``, ``TULIP_ERASE_PACE``: an erase's batch and rest.
    erase_batch: int = ERASE_BATCH.default
    erase_pace: float = ERASE_PACE.default

    def __post_init__(self) -> None:
        signer_of(self.signing_key)  # a key too short fails here, naming the variable

    @classmethod
    def from_env(cls, env: Env | None = None) -> WorkerSettings:
        """Settings from ``TULIP_*`` variables; a malformed value raises ``ValueError``
        naming the variable."""
        e = environ(env)
        return cls(
            store=StoreSettings.from_env(e),
            redis_url=wire.redis_url(e),
            database_admin_url=lib.DATABASE_ADMIN_URL.read(e),
            checkpoint_url=lib.CHECKPOINT_URL.read(e),
            claim_check_url=claim_check_url_from_env(e),
            s3_endpoint_url=lib.S3_ENDPOINT_URL.read(e),
            signing_key=wire.EVENT_SIGNING_KEY.read(e),
            concurrency={t: v.read(e) for t, v in CONCURRENCY.items()},
            limits=EventLimits.from_env(e),
            max_memories=MAX_MEMORIES.read(e),
            extractor=extractor_config(e),
            summary_model=SUMMARY_MODEL.read(e) or None,
            summary_budget=summary_budget(e),
            llm=LlmLimits.from_env(e),
            key_reservation=KEY_RESERVATION.read(e),
            tenant_share=TENANT_MAX_INFLIGHT.read(e),
            erase_batch=ERASE_BATCH.read(e),
            erase_pace=ERASE_PACE.read(e),
        )


def extractor_config(env: Env | None = None) -> LLMExtractorConfig | None:
    """From ``TULIP_EXTRACT_MODEL`` (and ``TULIP_EXTRACT_API_BASE``,
    ``TULIP_EXTRACT_API_KEY``, ``TULIP_EXTRACT_TIMEOUT``, ``TULIP_EXTRACT_CLIENT``);
    ``None`` when the model is unset (use the offline heuristic)."""
    e = environ(env)
    model = EXTRACT_MODEL.read(e)
    if not model:
        return None
    return LLMExtractorConfig(
        model=model,
        api_base=EXTRACT_API_BASE.read(e),
        api_key=EXTRACT_API_KEY.read(e),
        timeout=EXTRACT_TIMEOUT.read(e),
        client=cast(Client, EXTRACT_CLIENT.read(e)),  # one_of(*CLIENTS) checked it
    )


def summary_budget(env: Env | None = None) -> SummaryBudget:
    """``TULIP_SUMMARIZE_OVER_TOKENS`` (6000), ``TULIP_SUMMARY_STEP_TOKENS`` (a quarter
    of it), ``TULIP_SUMMARY_HEAD_TURNS`` (2), ``TULIP_SUMMARY_KEEP_RECENT`` (10)."""
    e = environ(env)
    over = SUMMARIZE_OVER_TOKENS.read(e)
    step = SUMMARY_STEP_TOKENS.read(e)
    return SummaryBudget(
        over_tokens=over,
        step_tokens=max(1, over // 4) if step is None else step,
        head_turns=SUMMARY_HEAD_TURNS.read(e),
        keep_recent=SUMMARY_KEEP_RECENT.read(e),
    )

"""Producer and reader settings: typed, frozen objects, read from the environment once.

Every value is checked when the settings are built, so a typo in a URL scheme or a
non-numeric timeout fails at startup with the variable's name, not at the first
publish in production.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tulip_memory.config import StoreSettings
from tulip_memory.credentials import redact_url
from tulip_memory.env import CHECKPOINT_URL, S3_ENDPOINT_URL, Var, positive, seconds
from tulip_memory.env import environ as environ_of
from tulip_producer.quota import PublishQuota
from tulip_wire import env as wire
from tulip_wire.claimcheck import claim_check_url_from_env
from tulip_wire.endpoints import BROKER_SCHEMES, REDIS_SCHEMES, scheme_of
from tulip_wire.env import DEFAULT_SPOOL_DIR
from tulip_wire.events import DEFAULT_MAX_EVENT_BYTES
from tulip_wire.numbering import DEFAULT_SEQ_IDLE_TTL
from tulip_wire.published import DEFAULT_STATUS_TTL
from tulip_wire.signing import signer_of

#: Named in the refusal when no broker is configured; never used as a default: a
#: guessed ``redis://127.0.0.1:6379/0`` would publish into whatever Redis the host runs.
EXAMPLE_BROKER_URL = wire.EXAMPLE_BROKER_URL
DEFAULT_EXTRACT_SHARDS = wire.EXTRACT_SHARDS.default
DEFAULT_CHECKPOINT_SHARDS = wire.CHECKPOINT_SHARDS.default
#: Read-your-writes overlay lifetime: far longer than any queue backlog should last.
DEFAULT_PENDING_TTL = 7 * 24 * 3600.0
DEFAULT_PUBLISH_TIMEOUT = 1.0

CLAIM_CHECK_SCHEMES = frozenset({"file", "s3", "memory"})

PENDING_TTL = Var("TULIP_PENDING_TTL", DEFAULT_PENDING_TTL, seconds)
STATUS_TTL = Var("TULIP_STATUS_TTL", DEFAULT_STATUS_TTL, seconds)
PUBLISH_TIMEOUT = Var("TULIP_PUBLISH_TIMEOUT", DEFAULT_PUBLISH_TIMEOUT, seconds)
SEQ_IDLE_TTL = Var("TULIP_SEQ_IDLE_TTL", DEFAULT_SEQ_IDLE_TTL, seconds)


def events_per_second(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError("must be a number of events a second") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be a finite number of events a second > 0")
    return value


#: Per-tenant publish quota (:mod:`tulip_producer.quota`): unset, none.
TENANT_PUBLISH_RATE = Var("TULIP_TENANT_PUBLISH_RATE", 0.0, events_per_second)
#: Unset: one second's worth of the rate.
TENANT_PUBLISH_BURST = Var("TULIP_TENANT_PUBLISH_BURST", 0, positive)
#: The compactor's window when a thread has no stored summary that fits.
CONTEXT_LENGTH = Var("TULIP_CONTEXT_LENGTH", 128_000, positive)


@dataclass(frozen=True, kw_only=True)
class ProducerSettings:
    """Where the producer publishes, spools and stores large payloads.

    ``broker_url`` has no default. ``redis_url`` (sequence numbers) defaults to
    ``broker_url``; ``claim_check_url``
    defaults to ``file://<spool_dir>/claims``. Both defaults are resolved on
    construction, so every field holds its effective value.
    """

    broker_url: str
    redis_url: str = ""
    spool_dir: Path = field(default_factory=lambda: Path(DEFAULT_SPOOL_DIR))
    extract_shards: int = DEFAULT_EXTRACT_SHARDS
    checkpoint_shards: int = DEFAULT_CHECKPOINT_SHARDS
    pending_ttl: float = DEFAULT_PENDING_TTL
    status_ttl: float = DEFAULT_STATUS_TTL
    publish_timeout: float = DEFAULT_PUBLISH_TIMEOUT
    claim_check_url: str = ""
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    s3_endpoint_url: str | None = None
    #: ``TULIP_EVENT_SIGNING_KEY``: every envelope is signed with it (never in ``repr``).
    signing_key: str | None = field(default=None, repr=False)
    #: Publish in one Redis round trip where possible (:mod:`tulip_producer.direct`);
    #: ``False`` always takes Celery's ``send_task`` (benchmarks compare the two).
    direct_publish: bool = True
    #: How long an idle key's sequence counter stays in Redis (``TULIP_SEQ_IDLE_TTL``).
    seq_idle_ttl: float = DEFAULT_SEQ_IDLE_TTL
    #: Per-tenant publish quota (``TULIP_TENANT_PUBLISH_RATE``/``_BURST``): none by default.
    quota: PublishQuota = field(default_factory=PublishQuota)

    def __post_init__(self) -> None:
        spool_dir = Path(self.spool_dir).absolute()
        object.__setattr__(self, "spool_dir", spool_dir)
        object.__setattr__(self, "redis_url", self.redis_url or self.broker_url)
        claims = self.claim_check_url or f"file://{spool_dir / 'claims'}"
        object.__setattr__(self, "claim_check_url", claims)
        _check_url("broker_url", self.broker_url, BROKER_SCHEMES)
        _check_url("redis_url", self.redis_url, REDIS_SCHEMES, hint=_REDIS_HINT)
        _check_url("claim_check_url", self.claim_check_url, CLAIM_CHECK_SCHEMES)
        _check_positive("extract_shards", self.extract_shards)
        _check_positive("checkpoint_shards", self.checkpoint_shards)
        _check_timeout("pending_ttl", self.pending_ttl)
        _check_timeout("status_ttl", self.status_ttl)
        _check_timeout("seq_idle_ttl", self.seq_idle_ttl)
        _check_positive("max_event_bytes", self.max_event_bytes)
        _check_timeout("publish_timeout", self.publish_timeout)
        signer_of(self.signing_key)  # a key too short fails here, naming the variable

    @property
    def broker_is_amqp(self) -> bool:
        return urlsplit(self.broker_url).scheme in {"amqp", "amqps", "pyamqp"}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProducerSettings:
        """Settings from ``TULIP_*`` variables; a malformed value, or no
        ``TULIP_BROKER_URL``, raises ``ValueError`` naming the variable."""
        env = environ_of(environ)
        broker_url = wire.BROKER_URL.read(env)
        if not broker_url:
            raise ValueError(f"{wire.MISSING_BROKER_URL}, or pass the URL to Producer.from_urls()")
        return cls(
            broker_url=broker_url,
            redis_url=wire.REDIS_URL.read(env),
            spool_dir=Path(wire.SPOOL_DIR.read(env)),
            extract_shards=wire.EXTRACT_SHARDS.read(env),
            checkpoint_shards=wire.CHECKPOINT_SHARDS.read(env),
            pending_ttl=PENDING_TTL.read(env),
            status_ttl=STATUS_TTL.read(env),
            publish_timeout=PUBLISH_TIMEOUT.read(env),
            claim_check_url=claim_check_url_from_env(env),
            max_event_bytes=wire.MAX_EVENT_BYTES.read(env),
            s3_endpoint_url=S3_ENDPOINT_URL.read(env),
            signing_key=wire.EVENT_SIGNING_KEY.read(env),
            seq_idle_ttl=SEQ_IDLE_TTL.read(env),
            quota=PublishQuota(TENANT_PUBLISH_RATE.read(env), TENANT_PUBLISH_BURST.read(env)),
        )


@dataclass(frozen=True, kw_only=True)
class ReaderSettings:
    """What a :class:`~tulip_producer.Reader` reads: its store's settings, and more.

    ``checkpoint_url`` empty: no thread state; ``redis_url`` (``TULIP_REDIS_URL``, else a
    Redis ``TULIP_BROKER_URL``) empty: no pending overlay or published-event markers.
    ``signing_key`` (``TULIP_EVENT_SIGNING_KEY``, as the producers'): the pending overlay
    serves only entries signed with it.
    """

    store: StoreSettings = field(default_factory=StoreSettings)
    checkpoint_url: str = ""
    redis_url: str = field(default="", repr=False)
    context_length: int = CONTEXT_LENGTH.default
    signing_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _check_positive("context_length", self.context_length)
        signer_of(self.signing_key)  # a key too short fails here, naming the variable

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ReaderSettings:
        env = environ_of(environ)
        return cls(
            store=StoreSettings.from_env(env),
            checkpoint_url=CHECKPOINT_URL.read(env),
            redis_url=wire.redis_url(env) or "",
            context_length=CONTEXT_LENGTH.read(env),
            signing_key=wire.EVENT_SIGNING_KEY.read(env),
        )


_REDIS_HINT = "set TULIP_REDIS_URL when the broker is not Redis"


def _check_url(name: str, url: str, schemes: frozenset[str], hint: str = "") -> None:
    scheme = scheme_of(url)
    if scheme not in schemes:
        extra = f" ({hint})" if hint else ""
        raise ValueError(
            f"{name}: unsupported URL scheme {scheme!r} in {redact_url(url)!r}; "
            f"expected one of {sorted(schemes)}{extra}"
        )


def _check_positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _check_timeout(name: str, value: float) -> None:
    if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {value!r}")

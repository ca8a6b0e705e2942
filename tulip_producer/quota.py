"""Per-tenant publish quotas: a token bucket in Redis, checked in the publish's round trip.

With ``TULIP_TENANT_PUBLISH_RATE`` set, each tenant (``namespace[0]``, a thread's
tenant) may publish that many events a second on average, in bursts of up to
``TULIP_TENANT_PUBLISH_BURST`` (default: one second's worth). The bucket lives in Redis
(:func:`tulip_wire.topology.quota_key`), so every producer process shares it, and the
script that numbers the event takes a token first (``tulip_wire/lua/quota.lua``): an
over-quota publish raises :class:`QuotaExceeded` and writes nothing (no number, no
marker, no pending entry, no message). Unset (the default), the script reads no bucket.

An event that goes to the producer's spool (Redis or the broker away, or older events
still spooled) is not counted, neither then nor when the spool delivers it: an outage
never turns into refusals once it is over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tulip_memory.errors import TulipMemoryError


class QuotaExceeded(TulipMemoryError):
    """``tenant`` published over its quota of ``rate`` events a second (bursts of
    ``burst``); it may publish again in ``retry_after`` seconds. Nothing was queued."""

    def __init__(self, tenant: str, rate: float, burst: int, retry_after: float) -> None:
        self.tenant = tenant
        self.rate = rate
        self.burst = burst
        self.retry_after = retry_after
        super().__init__(
            f"tenant {tenant!r} is over its publish quota of {rate:g} events/s "
            f"(burst {burst}, TULIP_TENANT_PUBLISH_RATE); retry in {retry_after:.3f}s"
        )


@dataclass(frozen=True)
class PublishQuota:
    """``rate`` events a second per tenant (0: no quota), in bursts of ``burst``."""

    rate: float = 0.0
    burst: int = 0

    def __post_init__(self) -> None:
        if not math.isfinite(self.rate) or self.rate < 0:
            raise ValueError(f"publish rate must be a finite number >= 0, got {self.rate!r}")
        if self.burst < 0:
            raise ValueError(f"publish burst must be >= 0, got {self.burst!r}")

    @property
    def on(self) -> bool:
        return self.rate > 0

    @property
    def bucket(self) -> int:
        """The bucket's size: ``burst``, else one second's worth (at least one)."""
        return self.burst or max(1, math.ceil(self.rate))

    def args(self) -> tuple[str, int]:
        """The script's rate and burst arguments (``"0"``: no quota)."""
        return (repr(self.rate), self.bucket) if self.on else ("0", 0)

    def exceeded(self, tenant: str, wait_ms: int) -> QuotaExceeded:
        return QuotaExceeded(tenant, self.rate, self.bucket, wait_ms / 1000)

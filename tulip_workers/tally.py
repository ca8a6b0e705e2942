"""Dead letters counted by reason class, in Redis, for ``tulip-memory metrics``.

The dead letters themselves are tenant-scoped rows (``tulip_workers.deadletters``); the
metrics process needs only how many of which kind, without a tenant and without an
administrator connection. So a worker adds one to ``tulip:deadletters[<class>]`` after a
dead letter commits. The classes name no tenant and no content:

- ``malformed``: the event is not one (decode, validation, claim check, size limits);
- ``model``: the model failed for good (garbage past the attempts, a refusal);
- ``killed``: the message killed its worker ``TULIP_MAX_WORKER_DEATHS`` times;
- ``data``: anything else the attempts did not cure (data Postgres refused, a bug);
- ``unhandled``: the event could not even be handled, a minimal letter was filed.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tulip_memory.errors import ModelCallError
from tulip_wire.events import EventError
from tulip_wire.topology import DEAD_LETTER_TALLY_KEY, LATENCY_TALLY_KEY, OUTCOME_TALLY_KEY

MALFORMED, MODEL, KILLED, DATA, UNHANDLED = "malformed", "model", "killed", "data", "unhandled"
REASON_CLASSES = (MALFORMED, MODEL, KILLED, DATA, UNHANDLED)

log = logging.getLogger(__name__)


def reason_class(error: BaseException) -> str:
    """The tally class of the error that made a dead letter."""
    if isinstance(error, EventError):
        return MALFORMED
    if isinstance(error, ModelCallError):
        return MODEL
    return DATA


@dataclass(frozen=True)
class DeadLetterTally:
    """The counters on one Redis (``TULIP_REDIS_URL``)."""

    client: Any  # redis.Redis

    def add(self, kind: str) -> None:
        """Count one dead letter; a Redis error is logged, never raised (the letter
        itself is already committed)."""
        try:
            self.client.hincrby(DEAD_LETTER_TALLY_KEY, kind, 1)
        except Exception as e:
            log.warning("dead letter not counted in Redis (%s: %s)", type(e).__name__, e)

    def counts(self) -> dict[str, int]:
        raw = self.client.hgetall(DEAD_LETTER_TALLY_KEY)
        found = {_text(k): int(v) for k, v in raw.items()}
        return {kind: found.get(kind, 0) for kind in (*REASON_CLASSES, *found)}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


#: Upper bounds (seconds) of the publish-to-done latency buckets: a few hundred ms for
#: a checkpoint, seconds to minutes for an extraction behind a model and a backlog.
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
_SEP = "\x1f"


@dataclass(frozen=True)
class OutcomeTally:
    """Events done per queue and outcome (``applied``, ``superseded``, ``duplicate``,
    ``dead``), and the seconds from an event's publish to its outcome per queue, as
    histogram buckets, on one Redis: what every worker adds and ``tulip-memory metrics``
    reads (no tenant, no key, no content)."""

    client: Any  # redis.Redis

    def add(self, queue: str, outcome: str, latency: float | None) -> None:
        """Count one outcome (and its latency, when the event's publish time is known);
        a Redis error is logged, never raised: the outcome itself is committed."""
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.hincrby(OUTCOME_TALLY_KEY, f"{queue}{_SEP}{outcome}", 1)
            if latency is not None and latency >= 0:
                at = bisect.bisect_left(LATENCY_BUCKETS, latency)
                bucket = str(LATENCY_BUCKETS[at]) if at < len(LATENCY_BUCKETS) else "+Inf"
                pipe.hincrby(LATENCY_TALLY_KEY, f"{queue}{_SEP}{bucket}", 1)
                pipe.hincrbyfloat(LATENCY_TALLY_KEY, f"{queue}{_SEP}sum", latency)
            pipe.execute()
        except Exception as e:
            log.warning("outcome not counted in Redis (%s: %s)", type(e).__name__, e)

    def outcomes(self) -> Iterator[tuple[str, str, int]]:
        """``(queue, outcome, count)`` of every outcome counted."""
        for field, value in self.client.hgetall(OUTCOME_TALLY_KEY).items():
            queue, _, outcome = _text(field).partition(_SEP)
            yield queue, outcome, int(value)

    def latencies(self) -> dict[str, tuple[list[tuple[str, int]], float]]:
        """Per queue: the cumulative ``(le, count)`` buckets (``+Inf`` last) and the sum
        of the seconds, as a Prometheus histogram has them."""
        per: dict[str, dict[str, float]] = {}
        for field, value in self.client.hgetall(LATENCY_TALLY_KEY).items():
            queue, _, bucket = _text(field).partition(_SEP)
            per.setdefault(queue, {})[bucket] = float(value)
        out: dict[str, tuple[list[tuple[str, int]], float]] = {}
        for queue, counts in per.items():
            running, buckets = 0, []
            for le in [*map(str, LATENCY_BUCKETS), "+Inf"]:
                running += int(counts.get(le, 0))
                buckets.append((le, running))
            out[queue] = (buckets, counts.get("sum", 0.0))
        return out

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

import logging
from dataclasses import dataclass
from typing import Any

from tulip_memory.errors import ModelCallError
from tulip_wire.events import EventError
from tulip_wire.topology import DEAD_LETTER_TALLY_KEY

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

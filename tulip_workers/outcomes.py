"""One structured log line per event outcome, for operators to grep or ship.

``logger tulip.events``, message = a JSON object: event id, key (namespace parts
joined by ``/``), queue (the shard), attempt, duration, outcome and, for dead
letters, the reason redacted to its class, length and hash
(:func:`~tulip_memory.redaction.redact`; the full reason is in the tenant's dead
letter). Never message content, model output or connection strings.
"""

from __future__ import annotations

import json
import logging

from tulip_memory.redaction import redact
from tulip_memory.store.validation import NS_SEP

log = logging.getLogger("tulip.events")


def log_outcome(
    *,
    event_id: str,
    key: str | None,
    queue: str | None,
    attempt: int,
    duration_ms: float,
    outcome: str,
    reason: str | None = None,
) -> None:
    record = {
        "event_id": event_id,
        "key": None if key is None else key.replace(NS_SEP, "/"),
        "queue": queue,
        "attempt": attempt,
        "duration_ms": round(duration_ms, 1),
        "outcome": outcome,
    }
    if reason is not None:
        record["reason"] = redact(reason)  # class, length, hash: never model output
    level = logging.ERROR if outcome == "dead" else logging.INFO
    log.log(level, json.dumps(record, ensure_ascii=False))

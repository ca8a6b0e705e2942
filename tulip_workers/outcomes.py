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
from tulip_workers.deadletters import UNKNOWN_TENANT

log = logging.getLogger("tulip.events")


def dead_letter_summary(
    reason: str,
    *,
    event_id: str,
    key: str | None,
    where: str | None,
    attempts: int | None = None,
) -> str:
    """What Celery, Flower and a log line may say of a dead letter: the reason's class,
    length and hash (:func:`~tulip_memory.redaction.redact`), where it failed and which
    event of which tenant, and how to read the full reason (kept only in the tenant's
    dead letter). Never message text or model output."""
    tenant = UNKNOWN_TENANT if not key else key.split(NS_SEP)[0]
    tried = f" after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else ""
    return (
        f"{redact(reason)}{tried} on {where or 'a worker'}: event {event_id} of tenant "
        f"{tenant!r}; "
        f"the full reason: tulip-memory dlq show {event_id} --tenant {tenant}"
    )


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

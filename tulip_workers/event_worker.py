"""Shared discipline of ordered event tasks: ledger, in-place retries, dead letters.

A redelivered event finds its ledger row and changes nothing; a transient failure is
retried here, in place, so later events of the key wait behind it; an event that keeps
failing, or is malformed, becomes a dead letter with its reason and the shard moves on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from tulip_memory.ledger import EventLedger
from tulip_memory.store import PgMemory
from tulip_memory.store.validation import NS_SEP
from tulip_wire.events import Envelope, EventError, PayloadRef, check_payload, decode
from tulip_workers.deadletters import UNKNOWN_TENANT, DeadLetter, DeadLetters
from tulip_workers.outcomes import log_outcome
from tulip_workers.retry import RetryPolicy, describe, is_permanent

log = logging.getLogger(__name__)

APPLIED, DUPLICATE, DEAD = "applied", "duplicate", "dead"
#: Recorded, but its write lost to a newer one under the sequence fence.
SUPERSEDED = "superseded"


def tenant_of_event(env: Envelope | None) -> str:
    """Whose dead letter an event is: the tenant its key starts with (``namespace[0]``,
    or a thread's tenant)."""
    if env is None:
        return UNKNOWN_TENANT
    return env.key.split(NS_SEP)[0]


class ClaimStore(Protocol):
    """Where claim-checked payloads are fetched from."""

    def get(self, ref: PayloadRef) -> bytes: ...


@dataclass(frozen=True)
class _Result:
    outcome: str
    event_id: str
    key: str | None
    attempt: int
    reason: str | None = None


class AlreadyApplied(Exception):
    """Rolls back a transaction whose event the ledger already holds."""


@dataclass(kw_only=True)
class EventWorker(ABC):
    """The delivery discipline every ordered event task shares: decode and validate,
    skip what the ledger already holds, apply with in-place retries, dead-letter what
    keeps failing, and log one line per outcome. Subclasses implement :meth:`_apply`."""

    store: PgMemory
    claims: ClaimStore | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    ledger: EventLedger = field(default_factory=EventLedger)
    dead_letters: DeadLetters = field(default_factory=DeadLetters)
    _ready: bool = False

    async def handle_durably(
        self, body: str, task_id: str | None = None, queue: str | None = None
    ) -> str:
        """:meth:`handle` until it returns. An error escaping it means the database
        itself is unreachable (events that fail are dead-lettered inside), so the
        shard waits here, in place, rather than acking or re-queueing the event."""
        attempt = 0
        while True:
            try:
                return await self.handle(body, task_id, queue)
            except Exception as e:
                attempt += 1
                delay = self.retry.delay(min(attempt, 8))
                log.error("cannot process event (%s); retry in %.1fs", describe(e), delay)
                await asyncio.sleep(delay)

    async def handle(self, body: str, task_id: str | None = None, queue: str | None = None) -> str:
        """Apply the event in ``body``; returns ``applied``, ``duplicate`` or ``dead``,
        and logs one structured line with the outcome."""
        started = time.perf_counter()
        result = await self._handle(body, task_id)
        log_outcome(
            event_id=result.event_id,
            key=result.key,
            queue=queue,
            attempt=result.attempt,
            duration_ms=(time.perf_counter() - started) * 1000,
            outcome=result.outcome,
            reason=result.reason,
        )
        return result.outcome

    async def _handle(self, body: str, task_id: str | None) -> _Result:
        await self._ensure()
        try:
            env = decode(body)
            if task_id is not None and env.id != task_id:
                raise EventError(f"event id does not match its task id {task_id!r}", env.id)
        except EventError as e:
            # The broker's task id is the producer's event id; a malformed body's own
            # "id" is not trusted to name the ledger row.
            event_id = task_id or e.event_id or "unknown"
            await self._dead(body, event_id, e.reason, attempts=1)
            return _Result(DEAD, event_id, None, 1, e.reason)
        if await self._done(env.id):
            return _Result(DUPLICATE, env.id, env.key, 0)
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return _Result(await self._apply(env, attempt), env.id, env.key, attempt)
            except Exception as e:
                if is_permanent(e) or attempt == self.retry.attempts:
                    await self._dead(body, env.id, describe(e), attempts=attempt, env=env)
                    return _Result(DEAD, env.id, env.key, attempt, describe(e))
                delay = self.retry.delay(attempt)
                log.warning(
                    "event %s attempt %d failed (%s); retry in %.2fs",
                    env.id,
                    attempt,
                    describe(e),
                    delay,
                )
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _ensure(self) -> None:
        if self._ready:
            return
        async with self.store.transaction(UNKNOWN_TENANT) as tx:
            await self.ledger.ensure(tx.conn)
            await self.dead_letters.ensure(tx.conn)
        self._ready = True

    async def _done(self, event_id: str) -> bool:
        async with self.store.transaction(UNKNOWN_TENANT) as tx:
            entry = await self.ledger.get(tx.conn, event_id)
        return entry is not None and entry.done

    async def _payload(self, env: Envelope) -> dict[str, Any]:
        if env.payload is not None:
            return env.payload
        if self.claims is None or env.payload_ref is None:
            raise EventError(
                "payload is claim-checked but no claim-check store is configured", env.id
            )
        raw = await asyncio.to_thread(self.claims.get, env.payload_ref)
        try:
            return check_payload(env, json.loads(raw))
        except ValueError as e:
            raise EventError(f"claim-checked payload is not valid JSON: {e}", env.id) from e

    async def _dead(
        self, body: str, event_id: str, reason: str, *, attempts: int, env: Envelope | None = None
    ) -> None:
        tenant = tenant_of_event(env)
        log.error("event %s is a dead letter: %s", event_id, reason)
        letter = DeadLetter(
            event_id=event_id,
            tenant=tenant,
            type=env.type if env else None,
            key=env.key if env else None,
            seq=env.seq if env else None,
            reason=reason,
            body=body,
            attempts=attempts,
            failed_at=datetime.now(UTC),
            replayed_at=None,
        )
        async with self.store.transaction(tenant) as tx:
            await self.dead_letters.put(tx.conn, letter)
            await self.ledger.record_dead(
                tx.conn,
                event_id=event_id,
                type=letter.type or "unknown",
                key=letter.key or "",
                seq=letter.seq,
                reason=reason,
                attempts=attempts,
            )

    @abstractmethod
    async def _apply(self, env: Envelope, attempt: int) -> str:
        """Apply ``env`` (``APPLIED``), or ``DUPLICATE`` when the ledger already had it;
        raise to retry (or :class:`EventError` for a permanent failure)."""

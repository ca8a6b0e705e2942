"""Shared discipline of ordered event tasks: ledger, in-place retries, dead letters.

A redelivered event finds its ledger row and changes nothing. A failure that means a
dependency is unreachable (:mod:`tulip_workers.failures`) is retried here, in place and
without limit, so later events of the key wait behind it and nothing is dead-lettered
by an outage. Any other failure gets ``retry.attempts`` attempts; then the event
becomes a dead letter with its reason and the shard moves on. A dead letter cannot
fail on content (:mod:`tulip_workers.deadletters`), so no message can stop a shard.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Protocol

from tulip_memory.erasures import DONE as DONE_ERASE
from tulip_memory.erasures import Erasures
from tulip_memory.ledger import EventLedger
from tulip_memory.redaction import redact
from tulip_memory.store import PgMemory
from tulip_memory.store.validation import NS_SEP
from tulip_wire.events import (
    DEFAULT_MAX_CLAIM_BYTES,
    Envelope,
    EventError,
    PayloadRef,
    decode,
    decode_payload,
)
from tulip_wire.forget import parse_marker, subject_digest
from tulip_wire.signing import ForgedEvent, Signer, forged_event_id
from tulip_wire.topology import forgetting_key
from tulip_workers.deadletters import (
    MAX_REASON_CHARS,
    UNKNOWN_TENANT,
    DeadLetter,
    DeadLetters,
    minimal,
    safe_text,
)
from tulip_workers.erasing import Eraser, Subject
from tulip_workers.failures import is_unreachable
from tulip_workers.outcomes import log_outcome
from tulip_workers.overlap import beside
from tulip_workers.retry import RetryPolicy, describe, is_permanent
from tulip_workers.tally import (
    KILLED,
    MALFORMED,
    UNHANDLED,
    DeadLetterTally,
    OutcomeTally,
    reason_class,
)

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

    def get(self, ref: PayloadRef, event_id: str, *, max_bytes: int) -> bytes:
        """The payload, reading no more than ``max_bytes`` + 1 bytes of it."""
        ...


@dataclass(frozen=True)
class Outcome:
    """What became of one delivery: ``applied``, ``duplicate``, ``dead`` (with its
    ``reason``) or a subclass's own (``superseded``)."""

    outcome: str
    event_id: str
    key: str | None = None
    attempt: int = 0
    reason: str | None = None
    #: When the event was published (its envelope's ``ts``), when it decoded.
    published: float | None = None
    #: Where the last attempt of a dead letter failed (its frames, never its message),
    #: so Celery and Flower show the original traceback, not the task wrapper's.
    traceback: TracebackType | None = field(default=None, compare=False, repr=False)


class DatabaseUnreachable(ConnectionError):
    """Postgres cannot be reached: names the setting and where it points."""

    def __init__(self, where: str, cause: BaseException) -> None:
        super().__init__(
            f"cannot reach Postgres at {where} (TULIP_DATABASE_URL): {describe(cause)}"
        )


class AlreadyApplied(Exception):
    """Rolls back a transaction whose event the ledger already holds."""


class ErasureUnderWay(Exception):
    """A tenant erase is still under way: the tenant's later events wait for it, in
    place, using up no attempt (as for an unreachable dependency)."""


def tenant_of_letter(env: Envelope | None) -> str:
    """The tenant a dead letter is filed under; one Postgres cannot pin goes to the
    unknown tenant (its letter is still written)."""
    tenant = tenant_of_event(env)
    return tenant if safe_text(tenant) == tenant else UNKNOWN_TENANT


@dataclass(kw_only=True)
class EventWorker(ABC):
    """The delivery discipline every ordered event task shares: decode and validate,
    skip what the ledger already holds, apply with in-place retries, dead-letter what
    keeps failing, and log one line per outcome. Subclasses implement :meth:`_apply`.

    ``max_body_bytes`` bounds an inline body (``TULIP_MAX_EVENT_BYTES``),
    ``max_claim_bytes`` a claim-checked payload (``TULIP_MAX_CLAIM_BYTES``)."""

    store: PgMemory
    claims: ClaimStore | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    ledger: EventLedger = field(default_factory=EventLedger)
    dead_letters: DeadLetters = field(default_factory=DeadLetters)
    max_body_bytes: int | None = None
    max_claim_bytes: int = DEFAULT_MAX_CLAIM_BYTES
    #: With a signer, only events signed by one of its keys are applied.
    signer: Signer | None = None
    tally: DeadLetterTally | None = None
    outcomes: OutcomeTally | None = None
    #: Where the store connects, credentials stripped, for errors that say so.
    database: str | None = None
    #: Applies erase events (:mod:`tulip_workers.erasing`); None: they are refused.
    eraser: Eraser | None = None
    erasures: Erasures = field(default_factory=Erasures)
    _ready: bool = False

    async def handle_durably(
        self,
        body: object,
        task_id: str | None = None,
        queue: str | None = None,
        *,
        killed: str | None = None,
    ) -> Outcome:
        """:meth:`handle` until it returns. What escapes it is the database failing
        outside an event's attempts (events that fail are dead-lettered inside): an
        unreachable one is waited for here, in place, without limit; any other error
        is retried ``retry.attempts`` times and then ends as a minimal dead letter,
        which holds nothing of the body and so cannot fail on it. ``killed``: the
        reason to dead-letter the event without applying it (it killed its workers)."""
        failures = waits = 0
        while True:
            try:
                return await self._outcome(body, task_id, queue, killed)
            except Exception as e:
                if is_unreachable(e):
                    waits += 1
                    delay = self.retry.delay(min(waits, 8))
                    log.error(
                        "a dependency is unreachable (%s); retry in %.1fs",
                        redact(describe(e)),
                        delay,
                    )
                    await asyncio.sleep(delay)
                    continue
                failures += 1
                log.error("cannot process event %s (%s)", task_id, redact(describe(e)))
                last = failures >= self.retry.attempts
                if last and (outcome := await self._last_resort(body, task_id, queue, e, failures)):
                    return outcome
                await asyncio.sleep(self.retry.delay(min(failures, 8)))

    async def handle(
        self, body: object, task_id: str | None = None, queue: str | None = None
    ) -> str:
        """Apply the event in ``body``; returns ``applied``, ``duplicate`` or ``dead``,
        and logs one structured line with the outcome."""
        return (await self._outcome(body, task_id, queue, None)).outcome

    async def _outcome(
        self, body: object, task_id: str | None, queue: str | None, killed: str | None
    ) -> Outcome:
        started = time.perf_counter()
        result = await self._handle(body, task_id, killed)
        self._log(result, queue, started)
        return result

    def _log(self, result: Outcome, queue: str | None, started: float) -> None:
        if self.outcomes is not None and queue is not None:
            latency = None if result.published is None else time.time() - result.published
            self.outcomes.add(queue, result.outcome, latency)
        log_outcome(
            event_id=result.event_id,
            key=result.key,
            queue=queue,
            attempt=result.attempt,
            duration_ms=(time.perf_counter() - started) * 1000,
            outcome=result.outcome,
            reason=result.reason,
        )

    async def _handle(self, body: object, task_id: str | None, killed: str | None) -> Outcome:
        await self._ensure()
        if killed is not None and task_id is not None:
            # Never applied again; filed under its tenant when it decodes (and
            # verifies) as the task's own event, else under the unknown tenant.
            own = self._own_event(body, task_id)
            if await self._done(task_id, tenant_of_letter(own)):
                return Outcome(DUPLICATE, task_id)
            reason = f"WorkerLost: {killed}"  # the class first, as describe()
            return await self._dead(body, task_id, reason, attempts=0, env=own, kind=KILLED)
        try:
            env = decode(body, max_bytes=self.max_body_bytes)
            if task_id is not None and env.id != task_id:
                raise EventError(f"event id does not match its task id {task_id!r}", env.id)
            if self.signer is not None:
                self.signer.verify(env)
        except EventError as e:
            # The broker's task id is the producer's event id; a malformed body's own
            # "id" is not trusted to name the ledger row, nor a forgery's either.
            event_id = task_id or e.event_id or "unknown"
            if isinstance(e, ForgedEvent):
                event_id = forged_event_id(body)
            reason = f"{type(e).__name__}: {e.reason}"  # the class first, as describe()
            return await self._dead(body, event_id, reason, attempts=1, kind=MALFORMED)
        done, ahead = await beside(self._done(env.id, tenant_of_letter(env)), self._ahead(env))
        if done:
            return Outcome(DUPLICATE, env.id, env.key)
        return await self._attempts(body, env, ahead)

    async def _ahead(self, env: Envelope) -> object | None:
        """What the first attempt reads, read beside the ledger check (``None``: it
        reads for itself). Only reads, so a duplicate's are merely wasted; a failure
        here is the attempt's to meet again, classified there, so it is dropped."""
        try:
            return await self._read_ahead(env)
        except Exception:
            return None

    async def _read_ahead(self, env: Envelope) -> object | None:
        return None

    def _own_event(self, body: object, task_id: str) -> Envelope | None:
        """``body`` decoded, if it is the (signed, when signing is on) event ``task_id``."""
        try:
            env = decode(body, max_bytes=self.max_body_bytes)
            if self.signer is not None:
                self.signer.verify(env)
        except EventError:
            return None
        return env if env.id == task_id else None

    async def _attempts(self, body: object, env: Envelope, ahead: object | None = None) -> Outcome:
        """Apply ``env``: an unreachable dependency is waited for without using up an
        attempt; any other failure uses one, and the last (or a permanent one) makes
        the event a dead letter. ``ahead``: the first attempt's reads (later ones read
        again)."""
        attempt = waits = 0
        while True:
            reads, ahead = ahead, None
            try:
                outcome = await self._apply(env, attempt + 1, reads)
                return Outcome(outcome, env.id, env.key, attempt + 1, published=env.ts)
            except Exception as e:
                if is_unreachable(e) or isinstance(e, ErasureUnderWay):
                    waits += 1
                    delay = self.retry.delay(min(waits, 8))
                    what = (
                        "a tenant erase is under way"
                        if isinstance(e, ErasureUnderWay)
                        else "a dependency is unreachable"
                    )
                else:
                    attempt += 1
                    if is_permanent(e) or attempt >= self.retry.attempts:
                        reason, kind = describe(e), reason_class(e)
                        return await self._dead(
                            body, env.id, reason, attempts=attempt, env=env, kind=kind,
                            trace=e.__traceback__,
                        )  # fmt: skip
                    delay = self.retry.delay(attempt)
                    what = f"attempt {attempt} failed"
                why = redact(describe(e))
                log.warning("event %s: %s (%s); retry in %.2fs", env.id, what, why, delay)
                await asyncio.sleep(delay)

    async def ready(self) -> None:
        """Connect and check the ledger and dead-letter tables, as the first event
        would; raises :class:`DatabaseUnreachable` (naming the setting) while
        Postgres cannot be reached, and what Postgres said for anything else."""
        await self._ensure()

    async def _ensure(self) -> None:
        if self._ready:
            return
        try:
            async with self.store.transaction(UNKNOWN_TENANT) as tx:
                await self.ledger.ensure(tx.conn)
                await self.dead_letters.ensure(tx.conn)
        except Exception as e:
            if is_unreachable(e) and self.database is not None:
                raise DatabaseUnreachable(self.database, e) from e
            raise
        self._ready = True

    async def _done(self, event_id: str, tenant: str) -> bool:
        """Whether ``tenant``'s ledger already holds the event as applied or dead."""
        async with self.store.transaction(tenant) as tx:
            entry = await self.ledger.get(tx.conn, event_id, tenant=tenant)
        return entry is not None and entry.done

    async def _payload(self, env: Envelope) -> dict[str, Any]:
        if env.payload is not None:
            return env.payload
        if self.claims is None or env.payload_ref is None:
            raise EventError(
                "payload is claim-checked but no claim-check store is configured", env.id
            )
        raw = await asyncio.to_thread(
            self.claims.get, env.payload_ref, env.id, max_bytes=self.max_claim_bytes
        )
        return decode_payload(env, raw)

    async def _dead(
        self,
        body: object,
        event_id: str,
        reason: str,
        *,
        attempts: int,
        kind: str,
        env: Envelope | None = None,
        trace: TracebackType | None = None,
    ) -> Outcome:
        """File the dead letter and its ledger row, in one transaction. A database
        that is away is waited for; a full letter that cannot be stored (whatever
        its content) is replaced by a minimal one."""
        reason = safe_text(reason, MAX_REASON_CHARS)
        log.error("event %s is a dead letter: %s", safe_text(event_id, 200), redact(reason))
        letter = DeadLetter.of(
            event_id=safe_text(event_id, 200),
            tenant=tenant_of_letter(env),
            type=env.type if env else None,
            key=safe_text(env.key) if env else None,
            seq=env.seq if env else None,
            reason=reason,
            body=body,
            attempts=attempts,
            failed_at=datetime.now(UTC),
        )
        # A letter of no event's own (malformed) takes its id only if no other
        # letter holds it; a digest of its body otherwise.
        digest = forged_event_id(body) if env is None else None
        letter = await self._file_whole_or_minimal(letter, digest)
        await self._count(kind)
        return Outcome(
            DEAD, letter.event_id, env.key if env else None, attempts, letter.reason,
            traceback=trace,
        )  # fmt: skip

    async def _file_whole_or_minimal(self, letter: DeadLetter, digest_id: str | None) -> DeadLetter:
        """File ``letter`` (:meth:`_file_unclaimed`); one that cannot be stored, whatever
        its content, is replaced by a minimal one. A database that is away is waited for.

        Minimal letters all live in the unknown tenant, where another tenant's minimal
        letter may hold the same event id: one is filed under its id only if no other
        letter holds it, else under its body's digest (never over the other one)."""
        try:
            return await self._file_unclaimed(letter, digest_id)
        except Exception as e:
            if is_unreachable(e):
                raise
            log.error(
                "dead letter of %s not stored (%s); storing a minimal one",
                letter.event_id,
                redact(describe(e)),
            )
            digest = digest_id or letter.digest_id
            return await self._file_unclaimed(minimal(letter, describe(e)), digest)

    async def _file(self, letter: DeadLetter) -> None:
        waits = 0
        while True:
            try:
                async with self.store.transaction(letter.tenant) as tx:
                    await self.dead_letters.put(tx.conn, letter)
                    await self.ledger.record_dead(
                        tx.conn,
                        tenant=letter.tenant,
                        event_id=letter.event_id,
                        type=letter.type or "unknown",
                        key=letter.key or "",
                        seq=letter.seq,
                        reason=letter.reason,
                        attempts=letter.attempts,
                    )
                return
            except Exception as e:
                if not is_unreachable(e):
                    raise
                waits += 1
                delay = self.retry.delay(min(waits, 8))
                log.error(
                    "cannot file the dead letter of %s (%s); retry in %.1fs",
                    letter.event_id,
                    redact(describe(e)),
                    delay,
                )
                await asyncio.sleep(delay)

    async def _last_resort(
        self,
        body: object,
        task_id: str | None,
        queue: str | None,
        error: Exception,
        failures: int,
    ) -> Outcome | None:
        """A minimal dead letter for an event that cannot even be handled; ``None``
        if the database refuses that too (then nothing event-specific is wrong)."""
        letter = DeadLetter.of(
            event_id=safe_text(task_id or "unknown", 200),
            tenant=UNKNOWN_TENANT,
            type=None,
            key=None,
            seq=None,
            reason=f"could not be handled {failures} times: {describe(error)}",
            body=body,
            attempts=failures,
            failed_at=datetime.now(UTC),
        )
        started = time.perf_counter()
        try:
            letter = await self._file_unclaimed(minimal(letter), forged_event_id(body))
        except Exception as e:
            log.error("cannot file a minimal dead letter of %s (%s)", task_id, redact(describe(e)))
            return None
        await self._count(UNHANDLED)
        result = Outcome(DEAD, letter.event_id, None, failures, letter.reason)
        self._log(result, queue, started)
        return result

    async def refused(
        self, raw: bytes, message_id: object, reason: str, queue: str | None = None
    ) -> Outcome:
        """A message refused before any task body ran (a task name no worker has, a
        content type the workers do not accept, a body that does not decode into a
        task's arguments, an item on the queue that is no broker message at all): a
        dead letter under the unknown tenant holding the bytes that arrived (a minimal
        one if even that cannot be stored). Its id is the message's task id when that
        is readable, else a digest of the bytes. A database that is away is waited
        for, in place."""
        started = time.perf_counter()
        waits = 0
        while True:
            try:
                await self._ensure()
                break
            except Exception as e:
                if not is_unreachable(e):
                    raise
                waits += 1
                log.error("%s; retry in place", redact(describe(e)))
                await asyncio.sleep(self.retry.delay(min(waits, 8)))
        named = isinstance(message_id, str) and 0 < len(message_id) <= 200
        if isinstance(message_id, str) and named and safe_text(message_id) == message_id:
            event_id = message_id
        else:
            event_id = forged_event_id(raw)
        letter = DeadLetter.of(
            event_id=event_id,
            tenant=UNKNOWN_TENANT,
            type=None,
            key=None,
            seq=None,
            reason=safe_text(reason, MAX_REASON_CHARS),
            body=raw,
            attempts=0,
            failed_at=datetime.now(UTC),
        )
        letter = await self._file_whole_or_minimal(letter, forged_event_id(raw))
        log.error("message %s is a dead letter: %s", letter.event_id, redact(letter.reason))
        await self._count(MALFORMED)
        result = Outcome(DEAD, letter.event_id, None, 0, letter.reason)
        self._log(result, queue, started)
        return result

    async def _file_unclaimed(self, letter: DeadLetter, digest_id: str | None) -> DeadLetter:
        """File a letter under the id its message names, unless another letter of its
        tenant holds that id (a forger naming a dead letter of the unknown tenant must
        not replace it): then under ``digest_id``, a digest of its body. Letters are
        keyed by ``(tenant, event_id)``, so another tenant's letter of that id neither
        counts nor stands in the way. The same message filed again finds its own
        letter. Without ``digest_id`` (an event's own letter) it is filed under its
        id, as it is."""
        if digest_id is None:
            await self._file(letter)
            return letter
        if letter.event_id != digest_id:
            try:
                async with self.store.transaction(letter.tenant) as tx:
                    held = await self.dead_letters.get(
                        tx.conn, letter.event_id, tenant=letter.tenant
                    )
                if held is None or held.sha256 == letter.sha256:
                    await self._file(letter)
                    return letter
            except Exception as e:
                if is_unreachable(e):
                    raise
                log.error(
                    "dead letter %s not filed under its own id (%s)",
                    letter.event_id,
                    redact(describe(e)),
                )
        letter = replace(letter, event_id=digest_id)
        await self._file(letter)
        return letter

    async def _forget(self, env: Envelope, attempt: int) -> str:
        """Apply an erase event: its tombstone, every store, then its ledger row."""
        if self.eraser is None:
            raise EventError("this worker has no eraser configured", env.id)
        subject = Subject.of(await self._payload(env))
        if not await self.eraser.begin(env, subject):
            return DUPLICATE
        await self.eraser.erase(env, subject)
        return APPLIED if await self.eraser.finish(env, subject, attempt) else DUPLICATE

    async def _fenced(self, conn: Any, env: Envelope, tenant: str) -> bool:
        """In the event's write transaction: take the tenant's erase lock shared and
        say whether an erase of the event's subject (or tenant) made after the event
        drops it (then record it ``superseded``, with no key, and write nothing);
        raise :class:`ErasureUnderWay` while a tenant erase published before the
        event is not done (its marker in Redis says so before its tombstone exists)."""
        marker = await self._forgetting(tenant)
        fence = await self.erasures.fence(conn, tenant, [subject_digest(env.key)])
        if fence.drops(env.ts):
            await self.ledger.claim(
                conn, tenant=tenant, event_id=env.id, type=env.type, key="", seq=env.seq,
                attempts=1, memories=0, superseded=True,
            )  # fmt: skip
            return True
        busy = fence.busy
        if not busy and marker is not None and env.ts > marker[1]:
            receipt = await self.erasures.get(conn, tenant, marker[0])
            busy = receipt is None or receipt.state != DONE_ERASE
        if busy:
            raise ErasureUnderWay(f"event {env.id} waits for an erase of tenant {tenant}")
        return False

    async def _erase_first(self, env: Envelope, tenant: str) -> None:
        """Before an event's costly part (a model call): raise :class:`ErasureUnderWay`
        while a tenant erase published before the event is not done, so a waiting
        event does not call the model again at every retry. Its write transaction
        checks again, under the lock (:meth:`_fenced`)."""
        marker = await self._forgetting(tenant)
        if marker is None or env.ts <= marker[1]:
            return
        async with self.store.transaction(tenant) as tx:
            receipt = await self.erasures.get(tx.conn, tenant, marker[0])
        if receipt is None or receipt.state != DONE_ERASE:
            raise ErasureUnderWay(f"event {env.id} waits for an erase of tenant {tenant}")

    async def _forgetting(self, tenant: str) -> tuple[str, float] | None:
        """The tenant's erase in flight, as its Redis marker names it (None without one,
        or without Redis)."""
        client = None if self.eraser is None else self.eraser.redis
        if client is None:
            return None
        return parse_marker(await asyncio.to_thread(client.get, forgetting_key(tenant)))

    async def _drop_claim(self, env: Envelope) -> None:
        """The claim check of an event an erase dropped."""
        if env.payload_ref is not None and self.eraser is not None:
            claims = self.eraser.claims
            if claims is not None:
                await asyncio.to_thread(claims.delete, [env.id])

    async def _count(self, kind: str) -> None:
        if self.tally is not None:
            await asyncio.to_thread(self.tally.add, kind)

    @abstractmethod
    async def _apply(self, env: Envelope, attempt: int, ahead: object | None = None) -> str:
        """Apply ``env`` (``APPLIED``), or ``DUPLICATE`` when the ledger already had it;
        raise to retry (or :class:`EventError` for a permanent failure). ``ahead``:
        what :meth:`_read_ahead` returned for this attempt, if anything."""

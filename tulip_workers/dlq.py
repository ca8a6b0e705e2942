"""Dead letters from a shell: list, show, replay (``tulip-memory dlq ...``).

An operator works across tenants, so these run on an administrator connection
(``TULIP_DATABASE_ADMIN_URL``) acting as ``tulip_ops``: a role that bypasses
row-level security but is never a superuser, so nothing a statement fires can act
as one. Before anything runs, :func:`as_operator` refuses tables that carry a
trigger, rule or policy the migrations did not create, or another owner. A replay
re-publishes the event exactly as it was, original sequence number included, so
the fencing of memory rows keeps a late replay from rolling back newer facts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tulip_memory.ledger import EventLedger
from tulip_memory.store.postgres import admin
from tulip_memory.store.postgres.audit import audit
from tulip_wire.events import EventError, decode
from tulip_workers.deadletters import DeadLetter, DeadLetters

Republish = Callable[[str], None]


async def as_operator(conn: Any) -> None:
    """Make ``conn`` act as the operator role, after checking the tables it touches."""
    await admin.as_operator(conn)
    await audit(conn, {**EventLedger().expected(), **DeadLetters().expected()})


async def list_dead(
    conn: Any, *, limit: int = 50, include_replayed: bool = False
) -> list[DeadLetter]:
    return await DeadLetters().list(conn, limit=limit, include_replayed=include_replayed)


async def show(conn: Any, event_id: str, tenant: str | None = None) -> DeadLetter:
    """The dead letter of ``event_id`` (of ``tenant``, when given). Letters are keyed
    by tenant and event id, so tenants may hold letters of the same id: then the
    tenant must be named, and the error lists the tenants that hold one."""
    letters = await DeadLetters().find(conn, event_id)
    if tenant is not None:
        letters = [d for d in letters if d.tenant == tenant]
    if not letters:
        of = f" in tenant {tenant!r}" if tenant is not None else ""
        raise LookupError(f"no dead letter with event id {event_id!r}{of}")
    if len(letters) > 1:
        tenants = ", ".join(repr(d.tenant) for d in letters)
        raise LookupError(
            f"event id {event_id!r} has dead letters in tenants {tenants}: name one with --tenant"
        )
    return letters[0]


async def replay(
    conn: Any, event_id: str, republish: Republish, tenant: str | None = None
) -> DeadLetter:
    """Re-publish a dead letter; the ledger lets the worker apply it once more. Only
    that tenant's letter and ledger row change (:func:`show` picks the letter)."""
    letter = await show(conn, event_id, tenant)
    try:
        decode(letter.body)
    except EventError as e:
        raise ValueError(
            f"event {event_id} cannot be replayed: it is malformed ({e.reason}); "
            "fix the producer and publish a new event"
        ) from e
    # Marked first and committed, so the worker that receives the event applies it;
    # a failed publish puts the marks back and the dead letter stays listed.
    async with conn.transaction():
        await EventLedger().mark_replaying(conn, event_id, tenant=letter.tenant)
        await DeadLetters().mark_replayed(conn, event_id, tenant=letter.tenant)
    try:
        republish(letter.body)
    except BaseException:
        async with conn.transaction():
            await EventLedger().record_dead(
                conn,
                tenant=letter.tenant,
                event_id=event_id,
                type=letter.type or "unknown",
                key=letter.key or "",
                seq=letter.seq,
                reason=letter.reason,
                attempts=0,
            )
            await DeadLetters().put(conn, letter)
        raise
    return letter


def describe(letter: DeadLetter) -> str:
    return (
        f"{letter.event_id}  {letter.failed_at:%Y-%m-%d %H:%M:%S}  tenant={letter.tenant}  "
        f"type={letter.type}  seq={letter.seq}  attempts={letter.attempts}"
        f"{'  (replayed)' if letter.replayed_at else ''}\n    {letter.reason}"
    )

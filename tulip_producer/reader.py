"""The synchronous read path: recall straight from Postgres, event status from the
ledger. No broker and no worker is involved in a read.

``AsyncReader`` is the implementation; ``Reader`` runs it on a private event loop
thread for synchronous backends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

from tulip_memory._portal import Portal
from tulip_memory.compactor import LLMCompactor
from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.tenants import TenantCheckpointers
from tulip_memory.erasures import Erasures
from tulip_memory.ledger import DONE, EventLedger
from tulip_memory.manager import Memory, MemoryType
from tulip_memory.messages import Message
from tulip_memory.registry import BaseCheckpointer, get_checkpointer
from tulip_memory.state import AgentState
from tulip_memory.store import PgMemory
from tulip_memory.store.validation import NS_SEP, validate_namespace
from tulip_memory.summaries import SummaryStore, compacted_view
from tulip_memory.turns import TurnHit
from tulip_producer.settings import CONTEXT_LENGTH, ReaderSettings
from tulip_wire.events import FORGET_TYPES
from tulip_wire.pending import PendingStates, pending_states, rebuild
from tulip_wire.published import PublishedEvents, published_events
from tulip_wire.signing import signer_of
from tulip_wire.statedelta import DeltaError

T = TypeVar("T")
log = logging.getLogger(__name__)
TYPES = tuple(t.value for t in MemoryType)
State = Literal["unknown", "pending", "applied", "superseded", "dead"]
#: The states a worker is done with: the event will not change again.
DONE_STATES: tuple[State, ...] = ("applied", "superseded", "dead")
View = Literal["full", "compacted"]


#: The most results one recall returns: a bound on the work and the reply of one call.
MAX_RECALL_LIMIT = 1000


def check_limit(name: str, value: int) -> None:
    """``value`` is a result count in ``1..MAX_RECALL_LIMIT``, or a ``ValueError``
    saying so (a ``limit=10**6`` would scan and ship a whole namespace)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RECALL_LIMIT:
        raise ValueError(f"{name} must be an integer in 1..{MAX_RECALL_LIMIT}, got {value!r}")


@dataclass(frozen=True)
class EventStatus:
    event_id: str
    state: State
    reason: str | None = None
    memories: int | None = None
    #: An erase's receipt: what it removed or blanked per store (``memories``,
    #: ``turns``, ``dead_letters``, ``ledger``, ``checkpoints``, ``redis_keys``), so far
    #: while ``pending``; never content. ``None`` for any other event.
    erased: Mapping[str, int] | None = None
    #: When the erase was done.
    erased_at: datetime | None = None


class AsyncReader:
    def __init__(
        self,
        store: PgMemory,
        *,
        checkpointer: BaseCheckpointer | None = None,
        pending: PendingStates | None = None,
        published: PublishedEvents | None = None,
        context_length: int | None = None,
    ) -> None:
        self.store = store
        #: The compactor's window (``TULIP_CONTEXT_LENGTH`` unless given).
        self.context_length = CONTEXT_LENGTH.read() if context_length is None else context_length
        self.checkpointer = checkpointer
        self.pending = pending
        self.published = published
        self._ledger = EventLedger()
        self._erasures = Erasures()
        self._ledger_ready = False
        self._tenants: TenantCheckpointers | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AsyncReader:
        """Postgres from ``TULIP_DATABASE_URL``; checkpoints from ``TULIP_CHECKPOINT_URL``
        and the pending overlay and published-event markers from ``TULIP_REDIS_URL``
        (else a Redis ``TULIP_BROKER_URL``) when they are set."""
        settings = ReaderSettings.from_env(environ)
        url, redis_url = settings.checkpoint_url, settings.redis_url
        return cls(
            settings.store.store(),
            checkpointer=get_checkpointer(url) if url else None,
            pending=pending_states(redis_url, signer_of(settings.signing_key)),
            published=published_events(redis_url),
            context_length=settings.context_length,
        )

    async def load(
        self,
        thread_id: str,
        checkpoint_id: str | None = None,
        view: View = "full",
        *,
        tenant: str,
    ) -> AgentState | None:
        """``tenant``'s thread's state: its pending state when one waits in Redis (read
        your writes: it is always the newest published), else the checkpoint store's.
        Another tenant's thread of the same id is another thread (``None`` here).

        ``view="compacted"``: system prompt + anchor turns + the stored background
        summary + the turns after it; when the summary is missing or stale, the
        compactor's own behaviour (:class:`~tulip_memory.compactor.LLMCompactor` with
        ``TULIP_CONTEXT_LENGTH``), never a wrong window.
        """
        if view not in ("full", "compacted"):
            raise ValueError(f"view must be 'full' or 'compacted', got {view!r}")
        state = await self._load(tenant, thread_id, checkpoint_id)
        if state is None or view == "full":
            return state
        messages = list(state.messages)
        return state.with_messages(await self._compacted(tenant, thread_id, messages))

    def threads(self, tenant: str) -> DeltaCheckpointer:
        """The checkpoint store of ``tenant``'s threads (see :mod:`tulip_memory.delta.tenants`)."""
        if self.checkpointer is None:
            raise ValueError("no checkpoint store configured (TULIP_CHECKPOINT_URL)")
        if self._tenants is None or self._tenants.base is not self.checkpointer:
            if not isinstance(self.checkpointer, DeltaCheckpointer):
                raise TypeError(
                    "thread state per tenant needs a DeltaCheckpointer on an object storage "
                    f"(s3://, file://), not {type(self.checkpointer).__name__}"
                )
            self._tenants = TenantCheckpointers(self.checkpointer)
        return self._tenants.of(tenant)

    async def _load(
        self, tenant: str, thread_id: str, checkpoint_id: str | None
    ) -> AgentState | None:
        threads = self.threads(tenant)  # refuses a bad tenant or store before any read
        if self.pending is not None:
            waiting = await self._pending_state(tenant, thread_id, checkpoint_id)
            if waiting is not None:
                return AgentState.from_checkpoint(waiting)
        return await threads.load(thread_id, checkpoint_id)

    async def _pending_state(
        self, tenant: str, thread_id: str, checkpoint_id: str | None
    ) -> dict[str, Any] | None:
        """The checkpoint (the newest if None) from the thread's pending list, its chain
        rooted in a whole state there or in a base the store has; None when it is not
        pending or its chain does not rebuild (then the store answers)."""
        assert self.pending is not None
        chain = await asyncio.to_thread(self.pending.chain, tenant, thread_id, checkpoint_id)
        if chain is None:
            return None
        root: dict[str, Any] | None = None
        if chain.root is not None:
            stored = await self.threads(tenant).load(thread_id, chain.root)
            if stored is None:
                log.warning("pending checkpoint's base %s is not durable yet", chain.root)
                return None
            root = stored.to_checkpoint()
        try:
            return await asyncio.to_thread(rebuild, chain, root)
        except DeltaError as e:
            log.warning("pending checkpoint does not rebuild (%s); loading from the store", e)
            return None

    async def _compacted(
        self, tenant: str, thread_id: str, messages: list[Message]
    ) -> list[Message]:
        summary = await SummaryStore(self.threads(tenant).storage).get(thread_id)
        view = compacted_view(messages, summary)
        if view is not None:
            return view
        return await LLMCompactor(context_length=self.context_length).async_apply(messages)

    async def recall(
        self, namespace: tuple[str, ...], query: str | None, limit: int = 10
    ) -> list[Memory]:
        """The ``limit`` memories of ``namespace`` most relevant to ``query`` (most
        recent without one), across every memory type, in one statement."""
        ns = validate_namespace(namespace)
        check_limit("limit", limit)
        hits = await self.store.search_across([(*ns, t) for t in TYPES], query, limit)
        out = []
        for hit in hits:
            try:
                out.append(Memory.from_store_value(hit.item.value))
            except (KeyError, TypeError, ValueError):
                continue  # not a memory value (written outside the pipeline)
        return out

    async def recall_turns(
        self,
        namespace: tuple[str, ...],
        query: str,
        top_k: int = 5,
        threshold: float | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[TurnHit]:
        """The completed turns of ``namespace`` most relevant to ``query`` (hybrid BM25 +
        cosine, complete whatever other tenants hold); ``turn_index`` is the turn's
        position within its session. ``since`` / ``until`` (timezone-aware) keep the
        turns whose time is in ``[since, until)``."""
        check_limit("top_k", top_k)
        matches = await self.store.search_turns(
            namespace, query, top_k, threshold, since=since, until=until
        )
        return [TurnHit(m.score, m.turn, m.position, m.text, m.metadata) for m in matches]

    async def status(self, event_id: str, *, tenant: str) -> EventStatus:
        """``applied``, ``superseded`` (recorded, but the sequence fence kept some of
        its writes out: a replay, a late redelivery, history stating an older fact) or
        ``dead`` (with the reason's class, length and hash) once a worker is done with
        ``tenant``'s event; ``pending`` while it is on its way; ``unknown`` for an id
        no producer published for ``tenant`` through this Redis (see
        :mod:`tulip_wire.published`). Another tenant's event id gets exactly the
        answer of an id nobody published: the ledger row is under row-level security
        and the published marker must name ``tenant``. A reader without Redis cannot
        tell pending from unknown and says ``pending``."""
        tenant = validate_namespace((tenant,))[0]
        async with self.store.transaction(tenant) as tx:
            if not self._ledger_ready:
                await self._ledger.ensure(tx.conn)
                self._ledger_ready = True
            entry = await self._ledger.get(tx.conn, event_id, tenant=tenant)
            receipt = None
            if entry is None or entry.type in FORGET_TYPES:
                receipt = await self._erasures.get(tx.conn, tenant, event_id)
        erased = None if receipt is None else dict(receipt.counts)
        if entry is None and receipt is None and not await self._published(event_id, tenant):
            return EventStatus(event_id, "unknown")
        if entry is None or entry.status not in DONE:
            return EventStatus(event_id, "pending", erased=erased)
        state = next(d for d in DONE_STATES if d == entry.status)
        at = None if receipt is None else receipt.finished_at
        return EventStatus(event_id, state, entry.reason, entry.memories, erased, at)

    # ``timeout`` as in QueuedMemoryManager.drain: a bound reported as TimeoutError.
    async def wait(
        self,
        event_id: str,
        *,
        tenant: str,
        timeout: float = 30.0,  # noqa: ASYNC109
        interval: float = 0.1,
    ) -> EventStatus:
        """``tenant``'s event's status once a worker is done with it (``applied``,
        ``superseded`` or ``dead``), asking every ``interval`` seconds; ``unknown`` at
        once for an id nobody published for ``tenant``. ``TimeoutError`` naming the
        event after ``timeout`` seconds. For reading one's own writes (a demo, a test,
        a backfill); a chat backend's request path never waits for a worker."""
        deadline = time.monotonic() + timeout
        while True:
            status = await self.status(event_id, tenant=tenant)
            if status.state != "pending":
                return status
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"event {event_id} of tenant {tenant!r} still pending after {timeout:g} s "
                    "(are the workers running? `tulip-memory dev` starts them)"
                )
            await asyncio.sleep(interval)

    async def _published(self, event_id: str, tenant: str) -> bool:
        """Whether a producer published ``event_id`` for ``tenant`` (its ordering key
        starts with the tenant); True when it cannot be told."""
        if self.published is None:
            return True
        key = await asyncio.to_thread(self.published.key_of, event_id)
        return key is not None and key.split(NS_SEP)[0] == tenant

    async def close(self) -> None:
        await self.store.close()


class Reader:
    """Blocking :class:`AsyncReader` for synchronous chat backends."""

    def __init__(self, store: PgMemory | AsyncReader) -> None:
        self._portal = Portal("tulip-reader")
        self.aio = store if isinstance(store, AsyncReader) else AsyncReader(store)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Reader:
        return cls(AsyncReader.from_env(environ))

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._portal.call(coro)

    def recall(
        self, namespace: tuple[str, ...], query: str | None, limit: int = 10
    ) -> list[Memory]:
        return self._call(self.aio.recall(namespace, query, limit))

    def recall_turns(
        self,
        namespace: tuple[str, ...],
        query: str,
        top_k: int = 5,
        threshold: float | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[TurnHit]:
        return self._call(
            self.aio.recall_turns(namespace, query, top_k, threshold, since=since, until=until)
        )

    def status(self, event_id: str, *, tenant: str) -> EventStatus:
        return self._call(self.aio.status(event_id, tenant=tenant))

    def wait(
        self, event_id: str, *, tenant: str, timeout: float = 30.0, interval: float = 0.1
    ) -> EventStatus:
        return self._call(
            self.aio.wait(event_id, tenant=tenant, timeout=timeout, interval=interval)
        )

    def load(
        self,
        thread_id: str,
        checkpoint_id: str | None = None,
        view: View = "full",
        *,
        tenant: str,
    ) -> AgentState | None:
        return self._call(self.aio.load(thread_id, checkpoint_id, view, tenant=tenant))

    def close(self) -> None:
        try:
            self._call(self.aio.close())
        finally:
            self._portal.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

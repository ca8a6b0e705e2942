"""Apply one erase event: every store of its subject, in batches, resumably, once.

An erase (:mod:`tulip_wire.forget`) first records its tombstone
(:mod:`tulip_memory.erasures`), holding the tenant's erase lock exclusively, so every
write of the tenant in flight has committed and every later one sees it. Then, store by
store, in batches of ``batch`` rows or objects, each SQL batch committed with its count
on the receipt:

- memories (every slot's vectors are columns of the row) and turns: deleted;
- dead letters: body, reason and key blanked (the row keeps its id and status);
- the ledger: keys and reasons blanked (ids and statuses stay); first, the claim-check
  objects and the ``tulip:published:<id>`` markers of those events are deleted;
- checkpoints: each thread's head, history, name and summary; for a tenant, then every
  object left under its four prefixes;
- Redis: the subject's sequence counters, a thread's pending list and summary marker.

The event's ledger row and the tombstone's ``done`` commit last, together: a worker
killed mid-erase leaves the event unacked, and its redelivery runs the erase again,
finding only what is left (each step deletes what its query still finds). Between
batches the erase sleeps ``pace`` times the batch's own time, so it takes at most
``1 / (1 + pace)`` of a connection and leaves the database to live recall.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.keys import HEADS, LOG, NAMES, SUMMARIES, ThreadKeys, tenant_part
from tulip_memory.delta.tenants import TenantCheckpointers
from tulip_memory.erasures import Erasures
from tulip_memory.ledger import TABLE as LEDGER
from tulip_memory.ledger import EventLedger
from tulip_memory.manager import MemoryType
from tulip_memory.store import PgMemory
from tulip_memory.store.postgres.render import render
from tulip_memory.store.validation import NS_SEP
from tulip_memory.summaries import SummaryStore
from tulip_wire.claimcheck import ClaimCheckStore
from tulip_wire.events import Envelope, thread_key
from tulip_wire.forget import MESSAGES, NAMESPACE, TENANT, THREAD, parse_marker, subject_digest
from tulip_wire.published import PUBLISHED_KEY_PREFIX
from tulip_wire.topology import (
    PENDING_KEY_PREFIX,
    SEQ_KEY_PREFIX,
    SUMMARY_PENDING_PREFIX,
    forgetting_key,
    pending_key,
    seq_key,
    summary_pending_key,
)
from tulip_workers.deadletters import TABLE as LETTERS

log = logging.getLogger(__name__)

#: Rows (or objects) one batch erases.
DEFAULT_BATCH = 2000
#: Sleep after a batch, as a multiple of the batch's own time.
DEFAULT_PACE = 1.0
#: Threads one page of a tenant erase takes.
THREAD_PAGE = 100
_EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@dataclass(frozen=True)
class Subject:
    """What an erase names: its scope, tenant and ordering key, and the namespace,
    thread or message ids of that scope."""

    scope: str
    tenant: str
    key: str
    namespace: tuple[str, ...] | None = None
    thread_id: str | None = None
    message_ids: tuple[str, ...] = ()

    @classmethod
    def of(cls, payload: dict[str, Any]) -> Subject:
        """The subject of a checked erase payload."""
        tenant = str(payload["tenant"])
        if "thread_id" in payload:
            thread = str(payload["thread_id"])
            return cls(THREAD, tenant, thread_key(tenant, thread), thread_id=thread)
        scope = str(payload["scope"])
        if scope == TENANT:
            return cls(TENANT, tenant, tenant)
        ns = tuple(payload["namespace"])
        ids = tuple(payload.get("message_ids") or ())
        return cls(scope, tenant, NS_SEP.join(ns), namespace=ns, message_ids=ids)

    @property
    def digest(self) -> str:
        """What the tombstone keeps of the subject ('' for a tenant: it names itself)."""
        return "" if self.scope == TENANT else subject_digest(self.key)


def _memory_namespaces(key: str) -> list[str]:
    """The stored namespaces of a namespace's memories: itself and one per type."""
    return [key, *(f"{key}{NS_SEP}{t.value}" for t in MemoryType)]


@dataclass(kw_only=True)
class Eraser:
    """Erases a subject from every store this worker reaches. ``checkpoints``: the
    checkpoint store (or None where none is configured); ``threads``: the tenant
    views the checkpoint worker writes through (their caches are dropped too)."""

    store: PgMemory
    ledger: EventLedger = field(default_factory=EventLedger)
    erasures: Erasures = field(default_factory=Erasures)
    claims: ClaimCheckStore | None = None
    checkpoints: DeltaCheckpointer | None = None
    redis: Any | None = None
    #: The tenant views a checkpoint worker writes through (so an erase drops their
    #: caches); else views of :attr:`checkpoints` of the eraser's own.
    views: Callable[[str], DeltaCheckpointer] | None = None
    batch: int = DEFAULT_BATCH
    pace: float = DEFAULT_PACE
    _tenants: TenantCheckpointers | None = None

    # -- the event -------------------------------------------------------------

    async def begin(self, env: Envelope, subject: Subject) -> bool:
        """Record the tombstone; False when the ledger already holds the erase."""
        async with self.store.transaction(subject.tenant) as tx:
            entry = await self.ledger.get(tx.conn, env.id, tenant=subject.tenant)
            if entry is not None and entry.done:
                return False
            await self.erasures.begin(
                tx.conn, tenant=subject.tenant, event_id=env.id, scope=subject.scope,
                subject=subject.digest, cutoff=env.ts,
            )  # fmt: skip
        return True

    async def erase(self, env: Envelope, subject: Subject) -> None:
        """Every store, in order: what references content last goes last (the
        ledger names the claim checks)."""
        count = self._counter(subject.tenant, env.id)
        await self._memories(subject, count)
        await self._turns(subject, count)
        await self._letters(subject, count)
        await self._checkpoints(subject, count)
        await self._ledger(subject, count)
        await self._redis_keys(subject, count)

    async def finish(self, env: Envelope, subject: Subject, attempt: int) -> bool:
        """The erase's ledger row (ids and status only) and its tombstone ``done``,
        in one transaction; False when a redelivery got there first."""
        async with self.store.transaction(subject.tenant) as tx:
            claimed = await self.ledger.claim(
                tx.conn, tenant=subject.tenant, event_id=env.id, type=env.type, key="",
                seq=env.seq, attempts=attempt, memories=0,
            )  # fmt: skip
            await self.erasures.finish(tx.conn, subject.tenant, env.id)
        if subject.scope == TENANT and self.redis is not None:
            await asyncio.to_thread(self._clear_marker, subject.tenant, env.id)
        return claimed

    def _clear_marker(self, tenant: str, event_id: str) -> None:
        """The tenant's in-flight marker, if it still names this erase."""
        assert self.redis is not None
        key = forgetting_key(tenant)
        marker = parse_marker(self.redis.get(key))
        if marker is not None and marker[0] == event_id:
            self.redis.delete(key)

    async def count(self, subject: Subject) -> dict[str, int]:
        """What an erase of ``subject`` would remove or blank now, per store (a dry
        run: nothing is changed)."""
        counts: dict[str, int] = {}
        t = self.store.table
        queries: dict[str, tuple[str, tuple[Any, ...]]] = {}
        if subject.scope != THREAD:
            queries["memories"] = self._where_memories(subject)
            queries["turns"] = self._where_turns(subject)
        queries["dead_letters"] = self._where_letters(subject)
        if subject.scope != MESSAGES:
            queries["ledger"] = self._where_ledger(subject)
        tables = {
            "memories": t, "turns": f"{t}_turns", "dead_letters": LETTERS, "ledger": LEDGER,
        }  # fmt: skip
        async with self.store.transaction(subject.tenant) as tx:
            for store, (where, args) in queries.items():
                stmt = f"SELECT count(*) FROM {tables[store]} WHERE {where}"
                counts[store] = int(await tx.conn.fetchval(stmt, subject.tenant, *args))
        counts["checkpoints"] = await self._count_checkpoints(subject)
        return counts

    async def _count_checkpoints(self, s: Subject) -> int:
        threads = self.threads(s.tenant)
        if threads is None or s.scope in (NAMESPACE, MESSAGES) or self.checkpoints is None:
            return 0
        if s.thread_id is not None:
            names = ThreadKeys.of(s.thread_id)
            singles = [names.head, SummaryStore.key(s.thread_id)]
            singles += [names.name] if names.name else []
            present = await threads.storage.read_objects(singles)
            history = await threads.storage.list_all(names.log_prefix)
            return len(history) + sum(1 for v in present.values() if v is not None)
        part = tenant_part(s.tenant)
        n = 0
        for kind in (HEADS, LOG, NAMES, SUMMARIES):
            n += len(await self.checkpoints.storage.list_all(f"{kind}{part}/"))
        return n

    # -- Postgres ----------------------------------------------------------------

    def _counter(self, tenant: str, event_id: str) -> Callable[[Any, str, int], Awaitable[None]]:
        async def count(conn: Any, store: str, n: int) -> None:
            await self.erasures.add(conn, tenant, event_id, {store: n})

        return count

    async def _batches(
        self,
        tenant: str,
        statement: str,
        args: tuple[Any, ...],
        on_rows: Callable[[Any, list[Any]], Awaitable[int]],
    ) -> None:
        """Run ``statement`` (``$1`` the tenant, the last parameter the batch size)
        until it returns fewer rows than a batch, each in its own transaction with
        ``on_rows``, pausing between batches."""
        while True:
            started = time.perf_counter()
            async with self.store.transaction(tenant) as tx:
                rows = await tx.conn.fetch(statement, tenant, *args, self.batch)
                n = await on_rows(tx.conn, list(rows))
            if len(rows) < self.batch:
                return
            log.debug("erase batch of %d rows in %.3fs", n, time.perf_counter() - started)
            await self._rest(time.perf_counter() - started)

    async def _rest(self, took: float) -> None:
        if self.pace > 0:
            await asyncio.sleep(self.pace * took)

    def _where_memories(self, s: Subject) -> tuple[str, tuple[Any, ...]]:
        if s.scope == TENANT:
            return "tenant = $1", ()
        where = "tenant = $1 AND ns = ANY($2::text[])"
        if s.scope == MESSAGES:
            return f"{where} AND (metadata -> 'source_ids') ?| $3::text[]", (
                _memory_namespaces(s.key),
                list(s.message_ids),
            )
        return where, (_memory_namespaces(s.key),)

    def _where_turns(self, s: Subject) -> tuple[str, tuple[Any, ...]]:
        if s.scope == TENANT:
            return "tenant = $1", ()
        if s.scope == MESSAGES:
            return (
                "tenant = $1 AND ns = $2 AND (metadata -> 'message_ids') ?| $3::text[]",
                (s.key, list(s.message_ids)),
            )
        return "tenant = $1 AND ns = $2", (s.key,)

    async def _delete(
        self, s: Subject, table: str, where: str, args: tuple[Any, ...], store: str, count: Any
    ) -> None:
        limit = f"${len(args) + 2}"
        stmt = (
            f"DELETE FROM {table} WHERE ctid = ANY(ARRAY("
            f"SELECT ctid FROM {table} WHERE {where} LIMIT {limit})) RETURNING 1"
        )

        async def counted(conn: Any, rows: list[Any]) -> int:
            await count(conn, store, len(rows))
            return len(rows)

        await self._batches(s.tenant, stmt, args, counted)

    async def _memories(self, s: Subject, count: Any) -> None:
        if s.scope == THREAD:
            return
        where, args = self._where_memories(s)
        await self._delete(s, self.store.table, where, args, "memories", count)

    async def _turns(self, s: Subject, count: Any) -> None:
        if s.scope == THREAD:
            return
        where, args = self._where_turns(s)
        await self._delete(s, f"{self.store.table}_turns", where, args, "turns", count)

    def _where_letters(self, s: Subject) -> tuple[str, tuple[Any, ...]]:
        live = "(size > 0 OR key IS NOT NULL)"
        if s.scope == TENANT:
            return f"tenant = $1 AND {live}", ()
        if s.scope == MESSAGES:
            where = (
                f"tenant = $1 AND key = $2 AND {live} AND EXISTS (SELECT 1 FROM "
                "unnest($3::text[]) AS i WHERE position(convert_to(i, 'UTF8') in raw) > 0)"
            )
            return where, (s.key, list(s.message_ids))
        return f"tenant = $1 AND key = $2 AND {live}", (s.key,)

    def _where_ledger(self, s: Subject) -> tuple[str, tuple[Any, ...]]:
        if s.scope == TENANT:
            return "tenant = $1 AND key <> ''", ()
        return "tenant = $1 AND key = $2", (s.key,)

    async def _letters(self, s: Subject, count: Any) -> None:
        """Dead letters of the subject: body, reason and key blanked."""
        where, args = self._where_letters(s)
        limit = f"${len(args) + 2}"
        stmt = render(
            f"""UPDATE {{l}} SET raw = ''::bytea, sha256 = '{_EMPTY_SHA256}', size = 0,
                key = NULL, reason = 'erased', replayed_at = coalesce(replayed_at, now())
            WHERE ctid = ANY(ARRAY(SELECT ctid FROM {{l}} WHERE {where} LIMIT {limit}))
            RETURNING event_id""",
            l=LETTERS,
        )

        async def counted(conn: Any, rows: list[Any]) -> int:
            await self._forget_events([r["event_id"] for r in rows])
            await count(conn, "dead_letters", len(rows))
            return len(rows)

        await self._batches(s.tenant, stmt, args, counted)

    async def _ledger(self, s: Subject, count: Any) -> None:
        """The subject's ledger rows keep ids and statuses: each batch's claim checks
        and published markers go first, then the rows' keys and reasons are blanked
        (so a rerun finds the rows whose claim checks may remain)."""
        if s.scope == MESSAGES:
            return  # the namespace's events stand; only some of their content went
        where, args = self._where_ledger(s)
        select = f"SELECT event_id FROM {LEDGER} WHERE {where} LIMIT ${len(args) + 2}"
        blank = (
            f"UPDATE {LEDGER} SET key = '', reason = NULL "
            "WHERE tenant = $1 AND event_id = ANY($2::text[])"
        )

        async def cleared(conn: Any, rows: list[Any]) -> int:
            ids = [r["event_id"] for r in rows]
            await self._forget_events(ids)
            await conn.execute(blank, s.tenant, ids)
            await count(conn, "ledger", len(ids))
            return len(ids)

        await self._batches(s.tenant, select, args, cleared)

    async def _forget_events(self, ids: list[str]) -> None:
        """The claim checks and published markers of these events."""
        if not ids:
            return
        if self.claims is not None:
            await asyncio.to_thread(self.claims.delete, ids)
        if self.redis is not None:
            await asyncio.to_thread(self.redis.delete, *(PUBLISHED_KEY_PREFIX + i for i in ids))

    # -- checkpoints ---------------------------------------------------------------

    def threads(self, tenant: str) -> DeltaCheckpointer | None:
        if self.checkpoints is None:
            return None
        if self.views is not None:
            return self.views(tenant)
        if self._tenants is None or self._tenants.base is not self.checkpoints:
            self._tenants = TenantCheckpointers(self.checkpoints)
        return self._tenants.of(tenant)

    async def _checkpoints(self, s: Subject, count: Any) -> None:
        threads = self.threads(s.tenant)
        if threads is None or s.scope in (NAMESPACE, MESSAGES):
            return
        if s.thread_id is not None:
            n = await self._thread(threads, s.tenant, s.thread_id)
            await self._count_now(s, count, "checkpoints", n)
            return
        seen: set[str] = set()
        while True:  # a tenant: its threads page by page, then whatever is left
            started = time.perf_counter()
            page = await threads.list_threads_page(THREAD_PAGE)
            fresh = [t for t in page.thread_ids if t not in seen]
            if not fresh:  # none left (or only what would not go: the sweep takes it)
                break
            seen.update(fresh)
            n = 0
            for thread in fresh:
                n += await self._thread(threads, s.tenant, thread)
            await self._count_now(s, count, "checkpoints", n)
            await self._rest(time.perf_counter() - started)
        await self._count_now(s, count, "checkpoints", await self._sweep(s.tenant))

    async def _thread(self, threads: DeltaCheckpointer, tenant: str, thread: str) -> int:
        """One thread: head, history and name (through the checkpointer, which drops
        its caches), its summary, and its pending list and summary marker."""
        storage = threads.storage
        names = ThreadKeys.of(thread)
        singles = [names.head, SummaryStore.key(thread), *([names.name] if names.name else [])]
        present = await storage.read_objects(singles)
        history = await storage.list_all(names.log_prefix)
        await threads.delete(thread)
        await storage.delete_objects([SummaryStore.key(thread)])
        tk = thread_key(tenant, thread)
        await self._del(pending_key(tk), summary_pending_key(tk), seq_key(tk))
        return len(history) + sum(1 for v in present.values() if v is not None)

    async def _sweep(self, tenant: str) -> int:
        """Every object left under the tenant's four prefixes (a history without its
        head, a summary of a thread already gone)."""
        assert self.checkpoints is not None
        storage = self.checkpoints.storage
        part = tenant_part(tenant)
        n = 0
        for kind in (HEADS, LOG, NAMES, SUMMARIES):
            keys = await storage.list_all(f"{kind}{part}/")
            for start in range(0, len(keys), 1000):
                await storage.delete_objects(keys[start : start + 1000])
            n += len(keys)
        return n

    async def _count_now(self, s: Subject, count: Any, store: str, n: int) -> None:
        if n:
            async with self.store.transaction(s.tenant) as tx:
                await count(tx.conn, store, n)

    # -- Redis ---------------------------------------------------------------------

    async def _redis_keys(self, s: Subject, count: Any) -> None:
        """Sequence counters (a number, under a name that names the subject) and, for
        a thread or tenant, pending lists and summary markers."""
        if self.redis is None:
            return
        n = 0
        if s.scope == NAMESPACE:
            n += await self._del(seq_key(s.key))
        elif s.scope == THREAD:
            n += await self._del(seq_key(s.key), pending_key(s.key), summary_pending_key(s.key))
        elif s.scope == TENANT:
            for prefix in (SEQ_KEY_PREFIX, PENDING_KEY_PREFIX, SUMMARY_PENDING_PREFIX):
                pattern = f"{prefix}{_glob(s.tenant)}{NS_SEP}*"
                n += await asyncio.to_thread(self._del_matching, pattern)
            n += await self._del(seq_key(s.tenant))
        await self._count_now(s, count, "redis_keys", n)

    async def _del(self, *keys: str) -> int:
        if self.redis is None or not keys:
            return 0
        return int(await asyncio.to_thread(self.redis.delete, *keys))

    def _del_matching(self, pattern: str) -> int:
        assert self.redis is not None
        n = 0
        batch: list[Any] = []
        for key in self.redis.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 500:
                n += int(self.redis.delete(*batch))
                batch = []
        if batch:
            n += int(self.redis.delete(*batch))
        return n


def _glob(text: str) -> str:
    """``text`` as a literal in a Redis MATCH pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)

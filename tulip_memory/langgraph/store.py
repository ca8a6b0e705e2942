"""``TulipStore``: LangGraph's ``BaseStore`` over this project's stores.

``TulipStore.from_pg(dsn)`` is :class:`~tulip_memory.store.PgMemory` (Postgres +
pgvector, one tenant per ``namespace[0]`` under forced row-level security);
``TulipStore.in_memory()`` the in-process :class:`~tulip_memory.store.InMemoryStore`.
Batch-first, as LangGraph's stores: ``batch``/``abatch`` run ``GetOp``, ``PutOp``,
``SearchOp`` and ``ListNamespacesOp`` in order on one private event loop (sync calls
block on it, async ones await it), consecutive puts of a tenant as one atomic batch.

A search covers every namespace under its prefix in one ranking (``search_across``:
hybrid bm25 + vector recall with a query, newest first without), then applies
``filter`` (exact values and ``$eq $ne $gt $gte $lt $lte`` on value fields) and
``offset``/``limit``; when the filter drops rows it reads further until ``limit``
matching rows are found or the scope is exhausted, so a filtered page is complete.
An item put with ``index=False`` is found by filters but by no query. TTLs are not
supported (``supports_ttl`` is False: a put with ``ttl`` is refused, as LangGraph's
stores without TTL refuse it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from tulip_memory._portal import Portal
from tulip_memory.langgraph.index import embedder_of, searchable
from tulip_memory.store import BaseStore as TulipBaseStore
from tulip_memory.store import InMemoryStore, PgMemory
from tulip_memory.store.items import StoreItem

#: Marks, in an item's metadata, one put with ``index=False``.
UNINDEXED = "langgraph_unindexed"
#: Namespaces one search or listing reads at most.
MAX_NAMESPACES = 100_000
_OPS = {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"}


class TulipStore(BaseStore):
    """A LangGraph store on ``store`` (a :mod:`tulip_memory.store` backend).

    ``index`` is LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``): the
    constructors map ``embed`` to the project's embedders
    (:mod:`~tulip_memory.langgraph.index`); given ``store`` ready-made, only ``fields``
    is read from it (the store embeds with its own embedder)."""

    supports_ttl = False

    def __init__(self, store: TulipBaseStore, *, index: IndexConfig | None = None) -> None:
        self.store = store
        self.index_config = index
        self.fields = list(index.get("fields") or ["$"]) if index else None
        self._portal = Portal("tulip-langgraph-store")

    @classmethod
    def from_pg(cls, dsn: str, *, index: IndexConfig | None = None, **options: Any) -> TulipStore:
        """A store on :class:`~tulip_memory.store.PgMemory` at ``dsn`` (``options``:
        its keyword arguments, ``table=``, ``migrator=``...)."""
        if index is not None:
            options["embedder"] = embedder_of(index)
        return cls(PgMemory(dsn, **options), index=index)

    @classmethod
    def in_memory(cls, *, index: IndexConfig | None = None) -> TulipStore:
        """A store in this process (tests, development)."""
        embedder = embedder_of(index) if index is not None else None
        return cls(InMemoryStore(embedder=embedder, search_mode="ranked"), index=index)

    # -- LangGraph's batch ------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._portal.call(self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._portal.run(self._batch(list(ops)))

    async def _batch(self, ops: list[Op]) -> list[Result]:
        results: list[Result] = [None] * len(ops)
        puts: list[PutOp] = []
        for i, op in enumerate(ops):
            if isinstance(op, PutOp):
                puts.append(op)
                continue
            await self._put(puts)
            puts = []
            results[i] = await self._run(op)
        await self._put(puts)
        return results

    async def _run(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            found = await self.store.get_item(op.namespace, op.key)
            return None if found is None else _item(found)
        if isinstance(op, SearchOp):
            return await self._search(op)
        if isinstance(op, ListNamespacesOp):
            return await self._list_namespaces(op)
        raise TypeError(f"unknown store operation: {type(op).__name__}")

    async def _put(self, ops: Sequence[PutOp]) -> None:
        """Puts in order: deletes one by one, writes as batches per tenant."""
        last = {(op.namespace, op.key): op for op in ops}  # the last put of a key wins
        for op in last.values():
            if op.ttl is not None:
                raise NotImplementedError("TulipStore does not support TTL")
        for op in [op for op in last.values() if op.value is None]:
            await self.store.delete(op.namespace, op.key)
        by_tenant: dict[str, list[Any]] = {}
        for op in last.values():
            if op.value is None:
                continue
            value = searchable(op.value, op.index, self.fields)
            metadata = {UNINDEXED: True} if op.index is False else None
            item = (op.namespace, op.key, value, metadata)
            by_tenant.setdefault(op.namespace[0] if op.namespace else "", []).append(item)
        for items in by_tenant.values():
            await self.store.put_batch(items)

    async def _namespaces(self, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        return await self.store.list_namespaces(prefix or None, limit=MAX_NAMESPACES)

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        namespaces = await self._namespaces(op.namespace_prefix)
        want = max(op.offset, 0) + max(op.limit, 0)
        if not namespaces or want == 0:
            return []
        read = want
        while True:
            rows = await self._ranked(namespaces, op.query, read)
            kept = [(i, s) for i, s in rows if _matches(i.value, op.filter)]
            # A query ranks what was indexed; an item put with index=False comes after
            # all of those, unscored (as LangGraph's stores return it).
            ranked = [(i, s) for i, s in kept if not (op.query and i.metadata.get(UNINDEXED))]
            exhausted = len(rows) < read
            if len(ranked) >= want or exhausted:
                break
            read *= 4
        if op.query and exhausted:
            ranked += [(i, None) for i, _ in kept if i.metadata.get(UNINDEXED)]
        page = ranked[max(op.offset, 0) : want]
        return [_search_item(item, score if op.query else None) for item, score in page]

    async def _ranked(
        self, namespaces: list[tuple[str, ...]], query: str | None, limit: int
    ) -> list[tuple[StoreItem, float | None]]:
        """One ranking over ``namespaces``: the store's own where it has one."""
        across = getattr(self.store, "search_across", None)
        if across is not None:
            return [(r.item, r.score) for r in await across(namespaces, query, limit)]
        found = [
            i for items in await self.store.search_many(namespaces, query, limit) for i in items
        ]
        if not query:
            found.sort(key=lambda i: (i.updated_at, i.key), reverse=True)
        return [(item, None) for item in found[:limit]]

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = op.match_conditions or ()
        prefix: tuple[str, ...] = ()
        for c in conditions:
            if c.match_type == "prefix":
                path = tuple(c.path)
                prefix = path[: path.index("*")] if "*" in path else path
                break
        found: list[tuple[str, ...]] = []
        seen: set[tuple[str, ...]] = set()
        for ns in await self._namespaces(prefix):
            if not all(_condition(ns, c) for c in conditions):
                continue
            cut = ns[: op.max_depth] if op.max_depth is not None else ns
            if cut not in seen:
                seen.add(cut)
                found.append(cut)
        found.sort()
        return found[op.offset : op.offset + op.limit]

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        try:
            self._portal.call(self.store.close())
        finally:
            self._portal.close()


def _item(found: StoreItem) -> Item:
    return Item(
        value=found.value,
        key=found.key,
        namespace=found.namespace,
        created_at=found.created_at,
        updated_at=found.updated_at,
    )


def _search_item(found: StoreItem, score: float | None) -> SearchItem:
    return SearchItem(
        found.namespace,
        found.key,
        found.value,
        found.created_at,
        found.updated_at,
        score,
    )


def _condition(ns: tuple[str, ...], condition: MatchCondition) -> bool:
    path = tuple(condition.path)
    if len(path) > len(ns):
        return False
    part = ns[: len(path)] if condition.match_type == "prefix" else ns[len(ns) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


def _matches(value: Any, filter: Mapping[str, Any] | None) -> bool:
    """LangGraph's filter: each key's value equal, or every operator of it holding."""
    if not filter:
        return True
    if not isinstance(value, Mapping):
        return False
    for key, wanted in filter.items():
        got = value.get(key)
        if isinstance(wanted, Mapping) and wanted and set(wanted) <= _OPS:
            if not all(_compare(got, o, v) for o, v in wanted.items()):
                return False
        elif isinstance(wanted, Mapping):
            if not _matches(got, wanted):
                return False
        elif got != wanted:
            return False
    return True


def _compare(got: Any, op: str, wanted: Any) -> bool:
    if op == "$eq":
        return bool(got == wanted)
    if op == "$ne":
        return bool(got != wanted)
    try:
        if op == "$gt":
            return bool(got > wanted)
        if op == "$gte":
            return bool(got >= wanted)
        if op == "$lt":
            return bool(got < wanted)
        return bool(got <= wanted)
    except TypeError:
        return False

"""Namespaces' own HNSW graphs: a partial index over each big namespace's vectors.

One HNSW graph spans a table, every tenant's rows in it, so what a namespace's
nearest rows cost from it follows the namespace's share of the table, not its size:
an iterative scan reads about ``ef_search / share`` tuples to find them, the other
namespaces' ones included (:data:`~tulip_memory.store.postgres.plan.HNSW_COST`). A
namespace of 100,000 rows in a million-row table (10%) took 13.5 ms for its nearest
20 rows where the same rows as a table of their own take a few; one of 20,000 rows
(2%) reads its own vectors instead (the scope's scan, ~15 ms, linear). pgvector's
answer for a filter of few distinct values is a partial index per value; for many,
partitions. The namespaces that need it are few (a table's biggest), so each of them
gets a partial index of its own over its rows: a graph whose whole table is the
namespace (:data:`~tulip_memory.store.postgres.plan.OWN`), built and dropped online,
no table rewritten.

Which namespaces (:meth:`Graphs.refresh`): those of at least :data:`MIN_ROWS`
counted rows that are at most :data:`MAX_SHARE` of their table's rows (above it the
table's graph is nearly theirs already), the biggest :data:`MOST` of the memories and
of the turns (:data:`PER_TENANT` of a tenant's at most), one graph for each slot their
tenant's layout writes whose table graph
exists (so a reindex's new slot gets them once its index phase built the table's,
before recall switches to it). A namespace keeps its graph down to half
:data:`MIN_ROWS`, so one at the edge is not built and dropped over and over.

How. The registry ``<table>_graphs`` (migration 22) holds a row per graph, the
owner's to write, each tenant's to read. A graph is claimed (its row, not ready),
built (``CREATE INDEX CONCURRENTLY <p>_own<id> ... WHERE GRAPH_KEY = <the namespace's
key>``: writes go on), then marked ready; recall takes its plan from the ready ones
(``sql.PIN_COUNTED``). Dropping runs the other way: not ready, ``DROP INDEX
CONCURRENTLY``, the row deleted. The predicate is a 64-bit hash of the tenant and
namespace (``sql.GRAPH_KEY``), so no tenant's or namespace's name is written into
the catalog every role reads, and the key is computed by the server and pasted as an
integer. Recall never depends on the registry being right: a graph that is gone or
not built leaves the iterative scan short, or the planner reads the table's graph,
and the scope's scan answers (``plan.ways``). Nor on the key being unique: the hash
is not a cryptographic one, so another tenant could craft a namespace whose rows land
in a graph too; the search's own condition (tenant and namespace, and row-level
security) drops them, and a scan they leave short falls back to the scope's own rows,
so such rows can slow a search down to the scan it would take without a graph, no more.

What it costs. A write to such a namespace inserts into two graphs (a reindex's batch
too, whose update of a row is a new row version for every index): a 10-row
``put_batch`` into ``bench/recall.py --full``'s 100,000-row namespace took p50 29-31 ms
with its graph against 18.6-18.9 without (384-d, 2 cores), about 1.1 ms a row; every insert into
the table tests each graph's predicate (a hash of two short strings), and the planner
proves each graph's predicate for the statements over the table (a few microseconds
a graph), so :data:`MOST` bounds them. Building them is the table graph's build over
their rows: ``bench/recall.py --full``'s ten graphs (293,000 of a million rows) took
227 s on 2 cores.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from tulip_memory.reindex import sql
from tulip_memory.reindex.resources import build_resources
from tulip_memory.store.postgres import PgMemory
from tulip_memory.store.postgres import sql as store_sql
from tulip_memory.store.postgres.admin import as_operator, as_owner
from tulip_memory.store.postgres.audit import audit
from tulip_memory.store.postgres.migrations import expected
from tulip_memory.store.postgres.render import render
from tulip_memory.store.postgres.slots import ann_using, column, slot_index
from tulip_memory.store.validation import NS_SEP

log = logging.getLogger(__name__)

#: Counted rows from which a namespace gets a graph of its own: where its scan's ~7 ms
#: (plan.py: 0.7 us a row) starts to cost more than a small graph's search.
MIN_ROWS = 10_000
#: The largest share of its table a namespace with a graph of its own may have.
MAX_SHARE = 0.5
#: The most namespaces of a table (the memories, the turns) with graphs of their own.
MOST = 32
#: The most namespaces of one tenant, in a table, with graphs of their own: half the
#: table's, so that a tenant writing many big namespaces leaves the other half to the
#: others (a tenant may hold many big ones legitimately: an organisation's users).
PER_TENANT = MOST // 2
KINDS = ("memories", "turns")
#: Seconds between tries of a refresh for the lock another one holds.
LOCK_POLL = 1.0


@dataclass(frozen=True, order=True)
class Graph:
    """One namespace's own graph over one slot of the ``kind`` table."""

    kind: str
    tenant: str
    ns: str
    slot: str

    def __str__(self) -> str:
        """``memories of namespace ('acme', 'users', 'maya') (embedding)``: the
        namespace as the tuple an application names it by, not its stored key."""
        namespace = tuple(self.ns.split(NS_SEP))
        return f"{self.kind} of namespace {namespace!r} ({self.slot})"


@dataclass(frozen=True)
class Want:
    """A graph to build: its namespace's rows, and the ``WITH`` clause of its table's
    graph (``m``, ``ef_construction``): a graph as dense as the table's, which the
    planner prices as such beside it."""

    rows: int
    options: str


@dataclass(frozen=True)
class Registered:
    """A graph's registry row: its id, and whether its index is built (ready, there,
    valid); one that is not is built again."""

    id: int
    built: bool


@dataclass
class Refreshed:
    """What a refresh did: the graphs it built, the ones it dropped, the ones kept."""

    built: list[Graph] = field(default_factory=list)
    dropped: list[Graph] = field(default_factory=list)
    kept: list[Graph] = field(default_factory=list)


class Graphs:
    """Build and drop one ``PgMemory`` table's namespace graphs, through ``admin_dsn``
    (the administrator's, or a role that is a member of ``tulip_owner`` and reads
    every tenant's counters as ``tulip_ops``)."""

    def __init__(
        self,
        store: PgMemory,
        admin_dsn: str,
        *,
        most: int = MOST,
        min_rows: int = MIN_ROWS,
        max_share: float = MAX_SHARE,
        per_tenant: int = PER_TENANT,
    ) -> None:
        for name, value in (("most", most), ("per_tenant", per_tenant)):
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if not isinstance(min_rows, int) or min_rows < 1:
            raise ValueError(f"min_rows must be an integer >= 1, got {min_rows!r}")
        self.store = store
        self._dsn = admin_dsn
        self.most, self.min_rows, self.max_share = most, min_rows, max_share
        self.per_tenant = per_tenant

    def q(self, stmt: str, **names: str) -> str:
        return render(stmt, t=self.store.table, p=self.store.table_name, **names)

    def _table(self, kind: str) -> str:
        """The bare name of the ``kind`` table."""
        return self.store.table_name + ("_turns" if kind == "turns" else "")

    def _qualified(self, name: str) -> str:
        return f"{self.store.table.rsplit('.', 1)[0]}.{name}"

    async def refresh(self) -> Refreshed:
        """Build the graphs the namespaces need and drop the ones they no longer do,
        one refresh of a table at a time (a second waits for the first, then finds
        its work done)."""
        # One owner's session for the whole refresh: its advisory lock (released when
        # the session closes) and every build and drop. Polled, not waited for in a
        # statement: a statement waiting holds a snapshot, and the holder's CREATE
        # INDEX CONCURRENTLY waits for every such snapshot.
        async with as_owner(self._dsn) as owner:
            while True:
                if await owner.fetchval(self.q(sql.GRAPHS_LOCK)):
                    return await self._refresh(owner)
                await asyncio.sleep(LOCK_POLL)

    async def _refresh(self, owner: Any) -> Refreshed:
        wanted, registered, dims = await self._survey()
        done = Refreshed()
        for graph in sorted(set(registered) - set(wanted)):
            await self._drop(owner, registered[graph].id)
            done.dropped.append(graph)
        for graph, want in sorted(wanted.items()):
            known = registered.get(graph)
            if known is not None and known.built:
                done.kept.append(graph)
                continue
            await self._build(owner, graph, want, dims[graph.slot])
            done.built.append(graph)
        for kind in sorted({g.kind for g in done.built}):
            # The planner reads a graph only once its statistics show that the graph's
            # key keeps every row of the namespace (migration 22's, which autovacuum
            # may not fill for long on a big table that changes little).
            analyze = sql.ANALYZE_GRAPHED_TURNS if kind == "turns" else sql.ANALYZE_GRAPHED
            await owner.execute(self.q(analyze))
        for graph in done.built:
            log.info("namespace graph built: %s", graph)
        for graph in done.dropped:
            log.info("namespace graph dropped: %s", graph)
        return done

    async def _survey(self) -> tuple[dict[Graph, Want], dict[Graph, Registered], dict[str, int]]:
        """The graphs wanted (what to build them with), the registered ones (built:
        ready, and its index there and valid) and the slots' widths, read as
        ``tulip_ops`` after the tables' audit."""
        import asyncpg

        conn = await asyncpg.connect(self._dsn)
        try:
            await as_operator(conn)
            await audit(conn, expected(self.store.table, self.store.table_name))
            floor = max(1, self.min_rows // 2)
            candidates = await conn.fetch(self.q(sql.GRAPH_CANDIDATES), floor)
            registered: dict[Graph, Registered] = {}
            for r in await conn.fetch(self.q(sql.GRAPHS)):
                index = self._qualified(self._index(r["id"]))
                built = r["ready"] and await conn.fetchval(self.q(sql.INDEX_VALID), index)
                graph = Graph(r["kind"], r["tenant"], r["ns"], r["slot"])
                registered[graph] = Registered(r["id"], built is True)
            dims = {r["slot"]: r["dim"] for r in await conn.fetch(self.q(sql.SLOT_DIMS))}
            graphed = {(g.kind, g.tenant, g.ns) for g in registered}
            tables: dict[tuple[str, str], str | None] = {}
            wanted: dict[Graph, Want] = {}
            for r in self.select(candidates, graphed):
                kind, tenant, ns, rows = r["kind"], r["tenant"], r["ns"], int(r["rows"])
                for slot in _slots(r["slots"], dims):
                    if (kind, slot) not in tables:
                        name = self._qualified(slot_index(self._table(kind), slot))
                        found = await conn.fetchrow(self.q(sql.INDEX_OPTIONS), name)
                        valid = found is not None and found["indisvalid"]
                        tables[kind, slot] = _with(found["reloptions"]) if valid else None
                    options = tables[kind, slot]
                    if options is not None:
                        wanted[Graph(kind, tenant, ns, slot)] = Want(rows, options)
            return wanted, registered, dims
        finally:
            await conn.close()

    def select(
        self, candidates: Sequence[Mapping[str, Any]], graphed: Set[tuple[str, str, str]]
    ) -> list[Mapping[str, Any]]:
        """The namespaces of ``candidates`` (biggest first: ``kind``, ``tenant``,
        ``ns``, ``rows``, ``share``) that get graphs: at most :attr:`max_share` of
        their table, at least :attr:`min_rows` rows (half as many for those in
        ``graphed``, which have one), the biggest :attr:`most` of each table, and at
        most :attr:`per_tenant` of one tenant's in each: a tenant that writes many big
        namespaces cannot take every graph of its table from the others."""
        taken: Counter[str] = Counter()
        mine: Counter[tuple[str, str]] = Counter()
        out = []
        for r in candidates:
            kind, tenant = r["kind"], r["tenant"]
            if r["share"] > self.max_share or taken[kind] >= self.most:
                continue
            if mine[kind, tenant] >= self.per_tenant:
                continue
            if r["rows"] < self.min_rows and (kind, tenant, r["ns"]) not in graphed:
                continue
            taken[kind] += 1
            mine[kind, tenant] += 1
            out.append(r)
        return out

    async def _build(self, conn: Any, graph: Graph, want: Want, dim: int) -> None:
        """Claim ``graph``'s row, build its index (again, if a crash left it invalid)
        and mark it ready, on the owner's ``conn``."""
        gid = await conn.fetchval(
            self.q(sql.CLAIM_GRAPH), graph.kind, graph.tenant, graph.ns, graph.slot, want.rows
        )
        name = self._index(int(gid))
        if await conn.fetchval(self.q(sql.INDEX_VALID), self._qualified(name)) is False:
            await conn.execute(self.q(sql.DROP_GRAPH, i=self._qualified(name)))
        key = int(await conn.fetchval(store_sql.GRAPH_KEY_OF, graph.tenant, graph.ns))
        size = await conn.fetchrow(self.q(sql.BUILD_SIZE), self.store.table)
        memory, workers = build_resources(
            float(want.rows), dim, int(size["workers"]), int(size["maintenance_workers"])
        )
        await conn.execute(self.q(sql.BUILD_SETTINGS), f"{memory}MB", str(workers))
        create = sql.CREATE_TURNS_GRAPH if graph.kind == "turns" else sql.CREATE_GRAPH
        using = ann_using(graph.slot, dim) + want.options
        await conn.execute(
            self.q(create, i=name, using=using, key=store_sql.GRAPH_KEY, value=str(key))
        )
        await conn.execute(self.q(sql.GRAPH_READY), gid)

    async def _drop(self, conn: Any, gid: int) -> None:
        """Retire graph ``gid`` (recall stops choosing it), drop its index, forget it,
        on the owner's ``conn``."""
        await conn.execute(self.q(sql.GRAPH_RETIRED), gid)
        await conn.execute(self.q(sql.DROP_GRAPH, i=self._qualified(self._index(gid))))
        await conn.execute(self.q(sql.FORGET_GRAPH), gid)

    def _index(self, gid: int) -> str:
        """The bare name of graph ``gid``'s index."""
        return f"{self.store.table_name}_own{int(gid)}"


def _slots(names: Sequence[str], dims: dict[str, int]) -> list[str]:
    """The slots of a layout's write set that the registry knows, each name checked."""
    return [column(s) for s in names if s in dims]


_OPTIONS = ("m", "ef_construction")


def _with(reloptions: Sequence[str] | None) -> str:
    """The ``WITH`` clause of an HNSW index of ``reloptions`` (``["m=8", ...]``): its
    graph parameters as integers, nothing else of the catalog's text."""
    found = dict(o.split("=", 1) for o in reloptions or () if "=" in o)
    kept = [f"{k} = {int(found[k])}" for k in _OPTIONS if k in found and found[k].isdigit()]
    return f" WITH ({', '.join(kept)})" if kept else ""

"""``Reindexer``: move a table's vectors to another embedding model while it serves.

A job adds a vector slot for the new model (see
:mod:`~tulip_memory.store.postgres.slots`), from then on every write fills both
slots, cuts the rows into keyset ranges of ``batch`` rows and hands each range to
``send`` (the CLI sends Celery tasks to ``memory.reindex``; without ``send`` the
ranges run here, ``in_flight`` at a time, so one batch embeds while another writes).
A range embeds its rows that still lack the new vector in one embedder call and writes
them with one statement, in the transaction that marks the range done: a range that
runs twice changes nothing. After each write the batch pauses as long as its
:class:`~tulip_memory.reindex.pacing.Pacer` asks, so recall keeps its speed. When no range is
pending the job sweeps for any row still missing its vector, then switches recall to
the new slot in one transaction. ``finalize`` ends a job: after the switch it removes
the old vectors; before it, it abandons the job and removes the new ones.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from tulip_memory.embeddings import BaseEmbedding, embedder_from_config
from tulip_memory.errors import EmbeddingError
from tulip_memory.reindex import sql
from tulip_memory.reindex.graphs import Graphs
from tulip_memory.reindex.model import Progress, ReindexConflict, ReindexError, ReindexJob
from tulip_memory.reindex.pacing import Pacer
from tulip_memory.reindex.phases import PhaseObserver, phase
from tulip_memory.reindex.ranges import KINDS, Range, cut
from tulip_memory.reindex.resources import BUILD_MEMORY_MB as BUILD_MEMORY_MB
from tulip_memory.reindex.resources import BUILD_WORKERS as BUILD_WORKERS
from tulip_memory.reindex.resources import build_resources as build_resources
from tulip_memory.store.postgres import PgMemory
from tulip_memory.store.postgres.admin import as_operator, as_owner
from tulip_memory.store.postgres.audit import audit
from tulip_memory.store.postgres.migrations import expected
from tulip_memory.store.postgres.plan import GRAPH_MIN_ROWS
from tulip_memory.store.postgres.render import render
from tulip_memory.store.postgres.slots import (
    ALL_TENANTS,
    Layout,
    ann_using,
    column,
    slot_index,
    slot_name,
)
from tulip_memory.store.postgres.store import PGVECTOR_ANN_MAX_DIM
from tulip_memory.store.ranking import vector_or_none
from tulip_memory.store.validation import validate_namespace

log = logging.getLogger(__name__)

#: Sends one range of a job to a worker: ``send(job_id, range_id, tenant)``, the
#: range's tenant, which the batch runs pinned to.
Send = Callable[[int, int, str], None]
#: Builds an embedder from a model string and API base (``embedder_from_config``).
Build = Callable[[str, str | None], BaseEmbedding]
MAX_BATCH = 10_000
_PROBE = ["tulip-memory reindex probe"]


def build_embedder(model: str, api_base: str | None) -> BaseEmbedding:
    return embedder_from_config(model, api_base=api_base)


class Reindexer:
    """Start, run, watch and end online reindex jobs of one ``PgMemory`` table.

    ``store`` connects as the application role: a batch runs pinned to the tenant
    its task names, finds its range only if it is that tenant's, reads and writes
    the rows, marks the range done and may pause the job. Everything else (the job's
    columns and indexes, the slot registry and layouts, the job's rows, every
    tenant's ranges) is the owner role's, through ``admin_dsn`` (the administrator's,
    or a member of ``tulip_owner``): starting, switching, resuming, cancelling and
    finalizing need it. Without it (a batch worker) the last batch leaves the switch
    to whoever watches the job with it. Reindexing every tenant lists them as
    ``tulip_ops`` (BYPASSRLS, never superuser), after checking the tables carry
    nothing the migrations did not create."""

    def __init__(
        self,
        store: PgMemory,
        *,
        send: Send | None = None,
        admin_dsn: str | None = None,
        build: Build = build_embedder,
        observer: PhaseObserver | None = None,
        in_flight: int = 2,
        pace: bool = True,
    ) -> None:
        """``in_flight``: batches run at once without ``send``. ``pace=False`` runs
        this process's batches unpaced (see :mod:`~tulip_memory.reindex.pacing`)."""
        if not isinstance(in_flight, int) or in_flight < 1:
            raise ValueError(f"in_flight must be an integer >= 1, got {in_flight!r}")
        self.store = store
        #: Entered around each phase this process runs (see :mod:`~tulip_memory.reindex.phases`).
        self.observer = observer
        #: The pause after each batch this process runs; ``None``: none.
        self.pacer = Pacer() if pace else None
        self._in_flight = in_flight
        self._send = send
        self._admin_dsn = admin_dsn
        self._build = build

    # -- statements -----------------------------------------------------------

    def q(self, stmt: str, **names: str) -> str:
        """``stmt`` of :mod:`~tulip_memory.reindex.sql` for this table; slot columns
        (``v``, ``o``) pass :func:`~tulip_memory.store.postgres.slots.column` first."""
        checked = {k: column(v) if k in ("v", "o") else v for k, v in names.items()}
        return render(stmt, t=self.store.table, p=self.store.table_name, **checked)

    async def _fetch(self, stmt: str, *args: Any) -> list[Any]:
        """``stmt`` read as the operator (see :meth:`_view`), no tenant pinned."""
        async with self._view(None) as (conn, cols):
            return list(await conn.fetch(self.q(stmt, cols=cols), *args))

    @asynccontextmanager
    async def _view(self, tenant: str | None) -> AsyncIterator[tuple[Any, str]]:
        """A connection that reads jobs and ranges, and the job columns it may read:
        the owner role's (every row and column) with the administrator DSN; else the
        application role's pinned to ``tenant`` (its own rows and the all-tenants
        job), or to none (the all-tenants job alone), without the operator's columns."""
        if self._admin_dsn is not None:
            async with self._owner() as conn:
                yield conn, sql.JOB_COLS
            return
        async with self._pinned(tenant) as conn:
            yield conn, sql.APP_JOB_COLS

    @asynccontextmanager
    async def _pinned(self, tenant: str | None) -> AsyncIterator[Any]:
        """A transaction of the application role pinned to ``tenant`` (or to none)."""
        async with self.store.connection() as conn, conn.transaction():
            if tenant is not None:
                await conn.execute(self.store.statement("PIN_TENANT"), tenant)
            yield conn

    # -- reading --------------------------------------------------------------

    async def job(self, job_id: int, *, tenant: str | None = None) -> ReindexJob | None:
        """The job, as this reindexer may read it (see :meth:`_view`)."""
        async with self._view(_tenant_or_none(tenant)) as (conn, cols):
            row = await conn.fetchrow(self.q(sql.JOB, cols=cols), job_id)
        return None if row is None else ReindexJob.from_row(row)

    async def current(self, tenant: str | None = None) -> ReindexJob | None:
        """The open job of the scope, else its latest finalized one."""
        scope = _scope(tenant)
        async with self._view(scope or None) as (conn, cols):
            row = await conn.fetchrow(self.q(sql.LATEST_JOB, cols=cols), scope)
        return None if row is None else ReindexJob.from_row(row)

    async def progress(self, job_id: int, *, tenant: str | None = None) -> Progress:
        """How far the job is: over every tenant's ranges with the administrator DSN,
        else over ``tenant``'s."""
        async with self._view(_tenant_or_none(tenant)) as (conn, cols):
            found = await conn.fetchrow(self.q(sql.JOB, cols=cols), job_id)
            if found is None:
                raise ReindexError(f"no reindex job {job_id}")
            row = await conn.fetchrow(self.q(sql.PROGRESS), job_id)
        return Progress(ReindexJob.from_row(found), row["ranges"], row["done"], row["rows_done"])

    async def status(self, tenant: str | None = None) -> Progress | None:
        job = await self.current(tenant)
        return None if job is None else await self.progress(job.id, tenant=job.tenant)

    async def watch(
        self,
        job_id: int,
        on_progress: Callable[[Progress], None] | None = None,
        *,
        interval: float = 0.5,
    ) -> Progress:
        """Poll until the job switched, was finalized, paused or cancelled."""
        while True:
            progress = await self.progress(job_id)
            done = progress.ranges_done == progress.ranges
            if done and progress.job.status == "running" and self._admin_dsn is not None:
                await self.finish(job_id)
                progress = await self.progress(job_id)
            if on_progress is not None:
                on_progress(progress)
            if progress.finished:
                return progress
            await asyncio.sleep(interval)

    # -- starting -------------------------------------------------------------

    @phase("start")
    async def start(
        self,
        model: str,
        *,
        tenant: str | None = None,
        batch: int = 512,
        api_base: str | None = None,
    ) -> ReindexJob:
        """Start reindexing ``tenant`` (default: every tenant) to ``model``.

        Raises :class:`ReindexError` for an unknown model or one that does not
        answer, and :class:`ReindexConflict` while another job covers the scope."""
        if not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
            raise ReindexError(f"batch must be an integer in 1..{MAX_BATCH}, got {batch!r}")
        scope = _scope(tenant)
        self._need_owner("starting a reindex")
        if not scope:
            await (await self._admin()).close()
        embedder, dim = await self._probe(model, api_base)
        indexed = await self._indexed_tables(scope)
        job = await self._create(scope, model, embedder, dim, batch, api_base, indexed)
        await self._advance(job)
        return await self._require(job.id)

    @phase("probe")
    async def _probe(self, model: str, api_base: str | None) -> tuple[BaseEmbedding, int]:
        try:
            embedder = self._build(model, api_base)
        except ValueError as e:  # the factory's message names the model and the fix
            raise ReindexError(str(e)) from e
        except Exception as e:
            raise ReindexError(f"unknown embedding model {model!r}: {e}") from e
        try:
            vectors = await embedder.aembed(_PROBE)
        except Exception as e:
            cause = str(e) if isinstance(e, EmbeddingError) else f"{type(e).__name__}: {e}"
            raise ReindexError(f"embedding model {model!r} does not answer a probe: {cause}") from e
        return embedder, int(vectors.shape[1])

    @phase("create")
    async def _create(
        self,
        scope: str,
        model: str,
        embedder: BaseEmbedding,
        dim: int,
        batch: int,
        api_base: str | None,
        indexed: frozenset[str],
    ) -> ReindexJob:
        """The job row, its slot's columns and registry row, and the layouts that make
        every write fill the new slot: one transaction under the layout lock. The old
        slot's index over a table of ``indexed`` (bare names) stays for the job."""
        async with self._layout_change() as conn:
            open_jobs = [ReindexJob.from_row(r) for r in await conn.fetch(self.q(sql.OPEN_JOBS))]
            _refuse_overlap(scope, open_jobs)
            layout = await conn.fetchrow(self.store.statement("LAYOUT"), scope)
            current = await conn.fetchval(self.q(sql.SLOT_MODEL), layout["read_slot"])
            if current == embedder.model:
                where = f"tenant {scope!r}" if scope else "the table"
                raise ReindexError(f"{where} is already on {embedder.model!r}: nothing to do")
            args = (scope, embedder.model, model, api_base, dim, batch)
            job_id = await conn.fetchval(self.q(sql.INSERT_JOB), *args)
            slot = slot_name(job_id)
            await conn.execute(self.q(sql.SET_JOB_SLOT), job_id, slot)
            for stmt in (sql.ADD_COLUMN, sql.ADD_TURNS_COLUMN):
                await conn.execute(self.q(stmt, v=slot, dim=str(dim)))
            info = (slot, embedder.model, dim, model, api_base)
            await conn.execute(self.q(sql.INSERT_SLOT), *info)
            if scope:
                await conn.execute(self.q(sql.ADD_WRITE_SLOT_TENANT), scope, slot)
            else:
                await conn.execute(self.q(sql.ADD_WRITE_SLOT_ALL), slot)
            reads = await self._reads(conn, ALL_TENANTS)
            others = {s for sc, s in reads.items() if sc != scope} if scope else set()
            for old in await self._read_slots(conn, scope):
                # Every batch rewrites its rows (a wider row rarely stays on its page),
                # so each old index takes every row again: for HNSW a graph search per
                # row (~1 ms of server CPU for 384 dimensions, 23x the batch's UPDATE
                # without it). So the old slot's index over the memories or the turns
                # goes for the job where recall never reads it: no namespace of the
                # scope is big enough for the HNSW graph (smaller ones read their own
                # vectors, ``plan.choose``). It stays where one is (that namespace's
                # recall would go linear for the job), or where another
                # tenant's recall still reads the slot; rebuilt if the old slot stays
                # read after all (a finalize abandoning the job).
                if old in others:
                    continue
                for table in (self.store.table_name, f"{self.store.table_name}_turns"):
                    if table not in indexed:
                        await conn.execute(self.q(sql.DROP_INDEX, i=self._index_of(old, table)))
        return await self._require(job_id)

    async def _indexed_tables(self, scope: str) -> frozenset[str]:
        """The tables (bare names: the memories, the turns) where recall of ``scope``
        may read the HNSW graph, by the namespace counters: read as ``tulip_ops`` for
        every tenant, pinned to the tenant for one."""
        args = (self.q(sql.INDEXED_SCOPES), scope, GRAPH_MIN_ROWS)
        if scope:
            async with self._pinned(scope) as conn:
                row = await conn.fetchrow(*args)
        else:
            conn = await self._admin()
            try:
                row = await conn.fetchrow(*args)
            finally:
                await conn.close()
        name = self.store.table_name
        return frozenset(
            t for t, big in ((name, row["memories"]), (f"{name}_turns", row["turns"])) if big
        )

    async def _reads(self, conn: Any, scope: str) -> dict[str, str]:
        """The slot recall reads, by layout row of ``scope`` (every row for every
        tenant); each row's slot names checked as read (:meth:`Layout.from_row`)."""
        rows = await conn.fetch(self.q(sql.LAYOUTS))
        return {
            r["scope"]: Layout.from_row(r).read for r in rows if not scope or r["scope"] == scope
        }

    async def _read_slots(self, conn: Any, scope: str) -> list[str]:
        """The slots recall reads in ``scope``."""
        return sorted(set((await self._reads(conn, scope)).values()))

    def _index_of(self, slot: str, table: str) -> str:
        """The qualified name of ``slot``'s HNSW index over ``table`` (a bare name)."""
        schema = self.store.table.rsplit(".", 1)[0]
        return f"{schema}.{slot_index(table, slot)}"

    async def _advance(self, job: ReindexJob) -> None:
        """Plan (if not planned), then send every pending range."""
        if job.status == "planning":
            await self._plan(job)
        await self._dispatch(job.id)

    @phase("index")
    async def _index(self, job: ReindexJob) -> None:
        """The new slot's HNSW index, built once the batches filled the column: one
        bulk build instead of a graph insert per row; then its big namespaces' own
        graphs, before recall switches to it."""
        await self._index_slot(job.slot, job.dim)
        await self._refresh_graphs()

    async def _index_slot(self, slot: str, dim: int) -> None:
        """A slot's HNSW indexes over the memories and the turns (the recall plan's
        index path reads both), each built concurrently (writes go on meanwhile) with
        the memory its graph needs; an invalid one left by a crash is dropped and
        built again."""
        if dim > PGVECTOR_ANN_MAX_DIM:
            return
        name = self.store.table_name
        await self._build_index(sql.CREATE_INDEX, name, slot, dim)
        await self._build_index(sql.CREATE_TURNS_INDEX, f"{name}_turns", slot, dim)

    async def _refresh_graphs(self) -> None:
        """The namespaces' own graphs over the slots the layouts write: a reindex's new
        slot gets them before recall switches to it, a finalized one loses them. They
        make recall faster, not complete, so a role that cannot read every tenant's
        counters (a migrator that is not ``tulip_ops``) leaves them to ``tulip-memory
        graphs`` rather than fail the job."""
        try:
            await Graphs(self.store, self._need_owner("building namespace graphs")).refresh()
        except PermissionError as e:
            log.warning("namespace graphs left as they were (run `tulip-memory graphs`): %s", e)

    async def _build_index(self, create: str, table: str, slot: str, dim: int) -> None:
        schema = self.store.table.rsplit(".", 1)[0]
        name = slot_index(table, slot)
        async with self._owner() as conn:
            if await conn.fetchval(self.q(sql.INDEX_VALID), f"{schema}.{name}") is False:
                await conn.execute(self.q(sql.DROP_INDEX, i=f"{schema}.{name}"))
            size = await conn.fetchrow(self.q(sql.BUILD_SIZE), f"{schema}.{table}")
            memory, workers = build_resources(
                float(size["rows"]), dim, int(size["workers"]), int(size["maintenance_workers"])
            )
            await conn.execute(self.q(sql.BUILD_SETTINGS), f"{memory}MB", str(workers))
            await conn.execute(self.q(create, i=name, using=ann_using(slot, dim)))

    async def _index_read_slots(self) -> None:
        """Every slot recall reads has its index (after a finalize), and no namespace
        graph is left over a slot no layout writes."""
        async with self._owner() as conn:
            read = await self._read_slots(conn, ALL_TENANTS)
            dims = {r["slot"]: r["dim"] for r in await conn.fetch(self.q(sql.SLOT_DIMS))}
        for slot in read:
            await self._index_slot(slot, dims[slot])
        await self._refresh_graphs()

    @phase("plan")
    async def _plan(self, job: ReindexJob) -> None:
        """Cut every tenant's rows (memories and turns) into ranges of ``batch`` keys."""
        tenants = [job.scope] if job.scope else await self._tenants()
        ranges: list[Range] = []
        total = 0
        for tenant in tenants:
            async with self.store.transaction(tenant) as tx:
                for kind in KINDS:
                    bounds = await tx.conn.fetch(self.q(kind.bounds_sql), tenant, job.batch)
                    total += bounds[0]["total"] if bounds else 0
                    ranges += cut(tenant, kind.name, [b["lo"] for b in bounds], len(ranges))
        async with self._owner() as conn, conn.transaction():
            await conn.execute(self.q(sql.DELETE_RANGES), job.id)
            await conn.execute(
                self.q(sql.INSERT_RANGES),
                job.id,
                [r.id for r in ranges],
                [r.tenant for r in ranges],
                [r.kind for r in ranges],
                [r.lo for r in ranges],
                [r.hi for r in ranges],
            )
            await conn.execute(self.q(sql.SET_PLANNED), job.id, total)

    async def _tenants(self) -> list[str]:
        """Every tenant with rows, listed through the administrator DSN."""
        conn = await self._admin()
        try:
            return [r["tenant"] for r in await conn.fetch(self.q(sql.TENANTS))]
        finally:
            await conn.close()

    async def _admin(self) -> Any:
        """A connection as ``tulip_ops``, refused unless it sees every row (under
        row-level security the plan would be empty and the switch would point recall
        at a slot no row has) and the tables carry only what the migrations made."""
        import asyncpg

        assert self._admin_dsn is not None
        try:
            conn = await asyncpg.connect(self._admin_dsn)
        except (OSError, asyncpg.PostgresError) as e:
            raise ReindexError(f"cannot connect with the administrator DSN: {e}") from e
        try:
            await as_operator(conn)
            await audit(conn, expected(self.store.table, self.store.table_name))
        except PermissionError as e:
            await conn.close()
            raise ReindexError(f"{e}; or reindex one tenant at a time with --tenant") from e
        return conn

    def _need_owner(self, what: str) -> str:
        if self._admin_dsn is None:
            raise ReindexError(
                f"{what} changes the table's columns, slot registry or layouts, which "
                "only the owner role may: set TULIP_DATABASE_ADMIN_URL (the "
                "administrator DSN, or a role that is a member of tulip_owner)"
            )
        return self._admin_dsn

    @asynccontextmanager
    async def _owner(self) -> AsyncIterator[Any]:
        """A connection acting as the owner role."""
        dsn = self._need_owner("this reindex step")
        try:
            async with as_owner(dsn) as conn:
                yield conn
        except PermissionError as e:
            raise ReindexError(str(e)) from e

    @asynccontextmanager
    async def _layout_change(self) -> AsyncIterator[Any]:
        """An owner's transaction holding the layout lock exclusively: it waits for
        the write transactions in flight, and later ones read the layout it commits."""
        async with self._owner() as conn, conn.transaction():
            await conn.execute(self.store.statement("LAYOUT_LOCK"))
            await conn.execute(self.store.statement("BUMP_LAYOUT"))
            yield conn

    async def _dispatch(self, job_id: int) -> None:
        pending = [(r["id"], r["tenant"]) for r in await self._fetch(sql.PENDING_RANGES, job_id)]
        if self._send is not None:
            for range_id, tenant in pending:
                self._send(job_id, range_id, tenant)
            if not pending:
                await self.finish(job_id)
            return
        gate = asyncio.Semaphore(self._in_flight)

        async def gated(range_id: int, tenant: str) -> None:
            async with gate:
                await self.run_batch(job_id, range_id, tenant, finish=False)

        async with asyncio.TaskGroup() as group:  # a failing batch cancels the others
            for range_id, tenant in pending:
                group.create_task(gated(range_id, tenant))
        await self.finish(job_id)

    # -- batches (the worker side) ----------------------------------------------

    @phase("batch")
    async def run_batch(
        self, job_id: int, range_id: int, tenant: str, *, finish: bool = True
    ) -> str:
        """Embed and write one range of ``tenant``, then pause as the pacer asks; what
        happened, in a word or a sentence. Everything runs pinned to ``tenant``: a task
        naming another tenant's range (or job) finds nothing, and is skipped.
        ``finish=False`` leaves the switch to the caller (the in-process dispatcher,
        which finishes once after every batch)."""
        try:
            tenant = validate_namespace((tenant,))[0]
        except ValueError as e:
            return f"refused: {e}"
        async with self._pinned(tenant) as conn:
            row = await conn.fetchrow(self.q(sql.JOB, cols=sql.APP_JOB_COLS), job_id)
            found = await conn.fetchrow(self.q(sql.RANGE), job_id, range_id, tenant)
        if row is None or found is None:
            what = f"job {job_id}" if row is None else f"range {range_id} of job {job_id}"
            skipped = f"skipped: tenant {tenant!r} has no reindex {what}"
            log.warning("reindex batch %s", skipped)  # stale, or forged
            return skipped
        job, rng = ReindexJob.from_row(row), Range.from_row(found)
        if job.status != "running":
            return f"skipped: job {job_id} is {job.status}"
        if rng.status == "done":
            outcome = "skipped: range already done"
        else:
            await self._calibrate(job.id)
            try:
                texts, keys = await self._rows(job, rng, sweep=False)
                vectors = await self._embed(job, texts)
            except _EmbedFailed as e:
                where = f"range {range_id} ({rng.kind} of tenant {rng.tenant!r})"
                await self.pause(job_id, f"{where}: {e}", tenant=tenant)
                return "paused"
            started = time.perf_counter()
            written = await self._write(job, rng, keys, vectors, mark=True)
            outcome = "skipped: stopped meanwhile" if written is None else f"{written} vectors"
            if written:
                await self._pace(job.id, time.perf_counter() - started)
        # Whoever sees no range pending finishes (idempotent): also a rerun of the last
        # batch whose first run wrote its range but failed while finishing. A batch
        # sees its tenant's ranges; only the owner sees every tenant's and switches.
        if finish and self._admin_dsn is not None:
            async with self._pinned(tenant) as conn:
                mine = await conn.fetch(self.q(sql.PENDING_RANGES), job_id)
            if not mine:
                await self.finish(job_id)
        return outcome

    @phase("pace")
    async def _pace(self, job_id: int, write: float) -> None:
        """The probe after a write that took ``write`` seconds, and the pause the
        pacer asks for from it."""
        if self.pacer is None:
            return
        pause = self.pacer.observe(job_id, await self._load_probe(), write)
        if pause > 0:
            await asyncio.sleep(pause)

    @phase("pace")
    async def _calibrate(self, job_id: int) -> None:
        """The pacer's reference probes, before this process's first batch of the job
        loads the database."""
        while self.pacer is not None and self.pacer.calibrating(job_id):
            self.pacer.observe(job_id, await self._load_probe())

    async def _load_probe(self) -> float:
        """Seconds the pacer's probe took (see :mod:`~tulip_memory.reindex.pacing`)."""
        async with self.store.connection() as conn:
            started = time.perf_counter()
            await conn.fetchval(sql.LOAD_PROBE)
            return max(time.perf_counter() - started, 1e-9)

    @phase("rows")
    async def _rows(self, job: ReindexJob, rng: Range, *, sweep: bool) -> tuple[list[str], Any]:
        async with self.store.transaction(rng.tenant) as tx:
            layout = await tx.layout()
            stmt = self.q(rng.kind_spec.rows_sql, v=job.slot, o=layout.read)
            rows = await tx.conn.fetch(stmt, rng.tenant, *rng.bound_args(sweep))
        return [r["text"] for r in rows], rows

    @phase("embed")
    async def _embed(self, job: ReindexJob, texts: list[str]) -> list[Any]:
        if not texts:
            return []
        try:
            embedder = await self.store.slot_embedder(job.slot)
            if embedder is None:
                raise ReindexError(f"slot {job.slot} has no embedder")
            encoded = await embedder.aembed(texts)
        except Exception as e:
            raise _EmbedFailed(f"{job.spec} failed: {type(e).__name__}: {e}") from e
        return [vector_or_none(encoded[i]) for i in range(len(texts))]

    @phase("write")
    async def _write(
        self, job: ReindexJob, rng: Range, rows: Any, vectors: list[Any], *, mark: bool
    ) -> int | None:
        """One statement for the range's vectors, and the range marked done, in one
        transaction; ``None`` (and nothing written) if the job stopped or another run
        of the range finished first."""
        from pgvector import Vector

        kind = rng.kind_spec
        try:
            async with self.store.transaction(rng.tenant) as tx:
                status = await tx.conn.fetchval(self.q(sql.JOB_STATUS_SHARE), job.id)
                if status != "running":
                    raise _Stop
                await tx.conn.execute(
                    self.q(kind.update_sql, v=job.slot),
                    rng.tenant,
                    *kind.key_arrays(rows),
                    [None if v is None else Vector(v) for v in vectors],
                )
                if (
                    mark
                    and await tx.conn.fetchval(self.q(sql.RANGE_DONE), job.id, rng.id, len(rows))
                    is None
                ):
                    raise _Stop
        except _Stop:
            return None
        return sum(v is not None for v in vectors)

    async def pause(self, job_id: int, error: str, *, tenant: str | None = None) -> None:
        """Stop a running job with ``error``, for ``--status`` to show; ``resume``
        goes on. Pinned to ``tenant``, the tenant of the batch that failed: it pauses
        that tenant's job or the all-tenants one, never another tenant's."""
        async with self._pinned(_tenant_or_none(tenant)) as conn:
            await conn.execute(self.q(sql.PAUSE), job_id, error)

    # -- the switch -------------------------------------------------------------

    @phase("finish")
    async def finish(self, job_id: int) -> ReindexJob:
        """Sweep for rows still missing the new vector, then switch recall to it. One
        process at a time (a session lock on the job): the worker that ran the last
        batch and the command watching the job may both get here."""
        self._need_owner("switching a job")
        async with self._owner() as lock:  # one connection: a batch worker may call this
            job = await self._job_on(lock, job_id)
            if job.status != "running" or await lock.fetch(self.q(sql.PENDING_RANGES), job_id):
                return job
            if not await lock.fetchval(sql.FINISH_LOCK, f"{self.store.table}/finish/{job_id}"):
                return job  # another process is switching it
            return await self._switch(await self._job_on(lock, job_id))

    async def _job_on(self, conn: Any, job_id: int) -> ReindexJob:
        """The job, read on an owner's connection."""
        row = await conn.fetchrow(self.q(sql.JOB, cols=sql.JOB_COLS), job_id)
        if row is None:
            raise ReindexError(f"no reindex job {job_id}")
        return ReindexJob.from_row(row)

    async def _switch(self, job: ReindexJob) -> ReindexJob:
        if job.status != "running":
            return job
        tenants = (
            [job.scope]
            if job.scope
            else [r["tenant"] for r in await self._fetch(sql.RANGE_TENANTS, job.id)]
        )
        for tenant in tenants:
            if await self._sweep(job, tenant) is None:
                return await self._require(job.id)
        await self._index(job)
        async with self._layout_change() as conn:
            locked = ReindexJob.from_row(await conn.fetchrow(self.q(sql.JOB_FOR_UPDATE), job.id))
            if locked.status != "running":
                return locked
            previous = await self._reads(conn, job.scope)
            if job.scope:
                await conn.execute(self.q(sql.READ_SLOT_TENANT), job.scope, job.slot)
            else:
                await conn.execute(self.q(sql.READ_SLOT_ALL), job.slot)
            await conn.execute(self.q(sql.SWITCHED), job.id, json.dumps(previous))
        return await self._require(job.id)

    async def _sweep(self, job: ReindexJob, tenant: str) -> int | None:
        """Rows of ``tenant`` whose read slot has a vector and the new slot none (none
        are expected: writes fill both slots): embed and write them. ``None`` if the
        model failed (the job is paused) or the job stopped."""
        total = 0
        for kind in KINDS:
            rng = Range(0, tenant, kind.name, None, None, "pending")
            texts, rows = await self._rows(job, rng, sweep=True)
            for lo in range(0, len(texts), job.batch):
                try:
                    vectors = await self._embed(job, texts[lo : lo + job.batch])
                except _EmbedFailed as e:
                    await self.pause(job.id, f"sweep of tenant {tenant!r}: {e}", tenant=tenant)
                    return None
                part = rows[lo : lo + job.batch]
                if await self._write(job, rng, part, vectors, mark=False) is None:
                    return None
                total += len(part)
        return total

    # -- operator commands ------------------------------------------------------

    async def resume(self, tenant: str | None = None) -> ReindexJob:
        """Go on with the scope's paused, cancelled or interrupted job: pending ranges
        are sent again (a range that already ran changes nothing)."""
        job = await self._open(tenant)
        if job.status == "switched":
            raise ReindexError(
                f"job {job.id} already switched {job.scope_label} to {job.spec!r}; "
                "`tulip-memory reindex --finalize` removes the old vectors"
            )
        if job.status != "planning":
            async with self._owner() as conn:
                await conn.execute(self.q(sql.SET_STATUS), job.id, "running", None)
        await self._advance(await self._require(job.id))
        return await self._require(job.id)

    async def cancel(self, tenant: str | None = None) -> ReindexJob:
        """Stop the scope's job: batches in flight write nothing; ``resume`` goes on,
        ``finalize`` abandons it."""
        job = await self._open(tenant)
        if job.status == "switched":
            raise ReindexError(
                f"job {job.id} already switched; finalize it (or start a job back to the old model)"
            )
        async with self._owner() as conn:
            await conn.execute(self.q(sql.SET_STATUS), job.id, "cancelled", "cancelled")
        return await self._require(job.id)

    async def finalize(self, tenant: str | None = None) -> ReindexJob:
        """End the scope's job. Switched: writes stop filling the old slot and its
        vectors are removed. Not switched: the job is abandoned and its new vectors
        are removed; recall never left the old slot."""
        job = await self._open(tenant)
        scope = job.scope or None
        clear: list[str] = []
        async with self._layout_change() as conn:
            job = ReindexJob.from_row(await conn.fetchrow(self.q(sql.JOB_FOR_UPDATE), job.id))
            if job.status == "switched":
                await conn.execute(self.q(sql.KEEP_READ_SLOT), scope)
                candidates = sorted(set(job.previous.values()) - {job.slot})
                note = None
            else:
                await conn.execute(self.q(sql.DROP_WRITE_SLOT), job.slot, scope)
                candidates = [job.slot]
                note = f"abandoned while {job.status}; recall never left the old vectors"
            for slot in candidates:
                if await conn.fetchval(self.q(sql.SLOT_IN_USE), slot):
                    clear.append(slot)
                    continue
                for stmt in (sql.DROP_COLUMN, sql.DROP_TURNS_COLUMN):
                    await conn.execute(self.q(stmt, v=slot))
                await conn.execute(self.q(sql.DELETE_SLOT), slot)
            await conn.execute(self.q(sql.FINALIZED), job.id, note)
        if job.scope:
            await self._clear(job.scope, clear)
        await self._index_read_slots()
        return await self._require(job.id)

    async def _clear(self, tenant: str, slots: Sequence[str]) -> None:
        """Remove a tenant's vectors of slots other tenants still use."""
        for slot in slots:
            async with self.store.transaction(tenant) as tx:
                for stmt in (sql.CLEAR_TENANT_SLOT, sql.CLEAR_TENANT_TURNS_SLOT):
                    await tx.conn.execute(self.q(stmt, v=slot), tenant)

    async def _open(self, tenant: str | None) -> ReindexJob:
        job = await self.current(tenant)
        if job is None or job.status == "finalized":
            where = f"tenant {tenant!r}" if tenant else "every tenant"
            raise ReindexError(f"no open reindex job for {where}")
        return job

    async def _require(self, job_id: int) -> ReindexJob:
        job = await self.job(job_id)
        if job is None:
            raise ReindexError(f"no reindex job {job_id}")
        return job


class _EmbedFailed(Exception):
    """The job's model failed on a batch; the job pauses with this message."""


class _Stop(Exception):
    """Roll back: the job stopped or the range was done by another run."""


def _scope(tenant: str | None) -> str:
    if tenant is None:
        return ALL_TENANTS
    return validate_namespace((tenant,))[0]


def _tenant_or_none(tenant: str | None) -> str | None:
    return _scope(tenant) or None


def _refuse_overlap(scope: str, open_jobs: Sequence[ReindexJob]) -> None:
    for j in open_jobs:
        if j.scope == scope or not scope or not j.scope:
            raise ReindexConflict(
                f"reindex job {j.id} ({j.spec!r}, {j.scope_label}) is {j.status}, and "
                f"jobs may not overlap: {_hint(j.status)}"
            )


def _hint(status: str) -> str:
    if status in ("planning", "running"):
        return "watch it with `tulip-memory reindex --status`, or stop it with --cancel"
    if status == "switched":
        return "end it with `tulip-memory reindex --finalize` (removes the old vectors)"
    return "go on with `tulip-memory reindex --resume`, or abandon it with --finalize"

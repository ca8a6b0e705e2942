"""Reindex layouts, jobs and ranges are their tenant's under forced row-level security
(issue 13, part 2): pinned to one tenant, the application role reads and writes none
of another's; a batch task naming another tenant's range finds nothing; existing
tables migrate in place. Real Postgres throughout."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.reindex.test_reindex_store import NEW, Table, fill
from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.reindex import Reindexer, ReindexJob
from tulip_memory.store import PgMemory
from tulip_memory.store.postgres.admin import as_owner
from tulip_memory.store.postgres.family import apply_migrations
from tulip_memory.store.postgres.migrations import MEMORIES, names
from tulip_workers.reindexing import batch_args

Batch = tuple[int, int, str]


@pytest.fixture
async def table(postgres: Postgres) -> AsyncIterator[Table]:
    yield Table(f"rt_{uuid.uuid4().hex[:10]}", postgres.app_dsn, postgres.admin_dsn)


async def as_app(dsn: str, tenant: str | None) -> asyncpg.Connection:
    """The application role's connection, pinned to ``tenant`` for its session."""
    conn = await asyncpg.connect(dsn)
    if tenant is not None:
        await conn.execute("SELECT set_config('tulip.tenant', $1, false)", tenant)
    return conn


async def seen(dsn: str, table: str, tenant: str | None) -> dict[str, set[str]]:
    """Whose layout, job and range rows the app role sees pinned to ``tenant``."""
    conn = await as_app(dsn, tenant)
    try:
        layouts = {r[0] for r in await conn.fetch(f"SELECT scope FROM {table}_layout")}
        jobs = {r[0] for r in await conn.fetch(f"SELECT scope FROM {table}_reindex_jobs")}
        ranges = {r[0] for r in await conn.fetch(f"SELECT tenant FROM {table}_reindex_ranges")}
    finally:
        await conn.close()
    return {"layout": layouts, "jobs": jobs, "ranges": ranges}


#: The job columns only the operator roles read: they name tenants (``error``,
#: ``previous``) or count every tenant's rows (``planned_rows``).
OPERATORS = {"error", "previous", "planned_rows"}


async def unreadable(dsn: str, table: str, tenant: str) -> set[str]:
    """Which of :data:`OPERATORS` the app role pinned to ``tenant`` may not read."""
    conn = await as_app(dsn, tenant)
    refused = set()
    try:
        for column in OPERATORS:
            try:
                await conn.fetch(f"SELECT {column} FROM {table}_reindex_jobs")
            except asyncpg.InsufficientPrivilegeError:
                refused.add(column)
    finally:
        await conn.close()
    return refused


async def written(dsn: str, table: str, tenant: str, job: int) -> list[str]:
    """What the app role pinned to ``tenant`` changes of job ``job`` and its ranges."""
    conn = await as_app(dsn, tenant)
    try:
        return [
            await conn.execute(
                f"UPDATE {table}_reindex_ranges SET status = 'done' WHERE job = $1", job
            ),
            await conn.execute(
                f"UPDATE {table}_reindex_jobs SET status = 'paused', error = 'x' WHERE id = $1",
                job,
            ),
        ]
    finally:
        await conn.close()


async def started(
    table: Table, tenant: str | None
) -> tuple[PgMemory, Reindexer, ReindexJob, list[Batch]]:
    """Two tenants' rows and a job over ``tenant`` (every tenant: ``None``) whose
    batches are kept, not run."""
    store = table.store()
    await fill(store, ["acme", "globex"], 6)
    sent: list[Batch] = []
    reindexer = Reindexer(store, send=lambda *b: sent.append(b), admin_dsn=table.admin_dsn)
    return store, reindexer, await reindexer.start(NEW, tenant=tenant, batch=4), sent


async def test_a_tenant_sees_and_writes_none_of_another_tenants_job(table: Table) -> None:
    store, reindexer, job, sent = await started(table, "globex")
    assert job.status == "running" and {t for _, _, t in sent} == {"globex"}
    t = table.name
    # globex's own view: its layout row, its job, its ranges (and the all-tenants row).
    assert await seen(table.app_dsn, t, "globex") == {
        "layout": {"", "globex"},
        "jobs": {"globex"},
        "ranges": {"globex"},
    }
    # Pinned to acme, or to nobody: none of globex's rows, and none can be written.
    empty = {"layout": {""}, "jobs": set(), "ranges": set()}
    assert await seen(table.app_dsn, t, "acme") == empty
    assert await seen(table.app_dsn, t, None) == empty
    assert await written(table.app_dsn, t, "acme", job.id) == ["UPDATE 0", "UPDATE 0"]
    # A forged batch naming globex's range (and job) under acme finds nothing.
    for job_id, range_id, _ in sent:
        outcome = await reindexer.run_batch(job_id, range_id, "acme")
        assert outcome == f"skipped: tenant 'acme' has no reindex job {job_id}"
    await reindexer.pause(job.id, "forged pause", tenant="acme")
    progress = await reindexer.progress(job.id)
    assert (progress.job.status, progress.ranges_done) == ("running", 0)
    # The genuine batches run and switch globex; acme still reads the original slot.
    for batch in sent:
        await reindexer.run_batch(*batch)
    assert (await reindexer.progress(job.id)).job.status == "switched"
    assert len(await store.search_by_embedding(("globex", "facts"), [0.1] * 48)) == 6
    assert len(await store.search_by_embedding(("acme", "facts"), [0.1] * 32)) == 6
    await store.close()


async def test_an_all_tenant_job_shows_each_tenant_its_own_ranges(table: Table) -> None:
    store, reindexer, job, sent = await started(table, None)
    t = table.name
    assert await seen(table.app_dsn, t, "acme") == {
        "layout": {""},
        "jobs": {""},  # the all-tenants job: ids, slot, model and status only
        "ranges": {"acme"},
    }
    assert await unreadable(table.app_dsn, t, "acme") == OPERATORS
    globex = [b for b in sent if b[2] == "globex"]
    acme = [b for b in sent if b[2] == "acme"]
    assert globex and acme
    job_id, range_id, _ = globex[0]
    forged = await reindexer.run_batch(job_id, range_id, "acme")
    assert forged == f"skipped: tenant 'acme' has no reindex range {range_id} of job {job_id}"
    assert (await reindexer.progress(job.id)).ranges_done == 0
    # As a batch worker (no administrator DSN) sees it: its tenant's part of the job.
    worker = Reindexer(store)
    assert (await worker.progress(job.id, tenant="acme")).ranges == len(acme)
    assert (await worker.job(job.id, tenant="acme")).error is None  # type: ignore[union-attr]
    for batch in acme:
        assert (await worker.run_batch(*batch)).endswith("vectors")
    await worker.pause(job.id, "model down", tenant="acme")
    paused = await reindexer.progress(job.id)
    assert (paused.job.status, paused.job.error) == ("paused", "model down")
    assert paused.ranges_done == len(acme)
    resent = len(sent)
    await reindexer.resume()
    assert {b[2] for b in sent[resent:]} == {"globex"}  # only the pending ranges
    for batch in sent[resent:]:
        await reindexer.run_batch(*batch)
    assert (await reindexer.progress(job.id)).job.status == "switched"
    await store.close()


def test_a_batch_task_refuses_forged_arguments() -> None:
    assert batch_args(3, 4, "acme") is None
    assert batch_args(3, 0, "acme") is None  # a job's first range
    assert "without its tenant" in (batch_args(3, 4, None) or "")
    for job_id, range_id in ((0, 1), (1, -1), ("1", 2), (True, 2), (2**40, 1)):
        assert "positive integer" in (batch_args(job_id, range_id, "acme") or "")
    for tenant in ("", 7, "x" * 300):
        assert "tenant" in (batch_args(1, 1, tenant) or "")


async def test_tables_of_the_previous_schema_migrate_in_place(postgres: Postgres) -> None:
    """Version 13 tables with a tenant's layout, job and ranges: migration 14 puts them
    under row-level security without losing a row (and 15 keeps the job's row count
    from the application role)."""
    name = f"rt_{uuid.uuid4().hex[:10]}"
    table = f"public.{name}"
    assert {14, 15} <= set(MEMORIES.versions)
    placeholders = {"t": table, **names(name=name, dim=32, tsconfig="english")}
    steps = MEMORIES.steps(placeholders, upto=13)
    async with as_owner(postgres.admin_dsn) as owner:
        await apply_migrations(owner, table, steps)
        await owner.execute(
            f"INSERT INTO {table}_slots (slot, model, dim) VALUES ('embedding', 'hashing-32', 32)"
        )
        await owner.execute(
            f"INSERT INTO {table}_layout VALUES ('globex', 'embedding', ARRAY['embedding'])"
        )
        job = await owner.fetchval(
            f"INSERT INTO {table}_reindex_jobs (scope, slot, model, spec, dim, batch, status) "
            "VALUES ('globex', 'embedding_1', 'hashing-48', 'hashing:48', 48, 4, 'cancelled') "
            "RETURNING id"
        )
        await owner.execute(
            f"INSERT INTO {table}_reindex_ranges (job, id, tenant, kind) "
            "VALUES ($1, 0, 'globex', 'memories')",
            job,
        )
    before = await seen(postgres.app_dsn, table, "acme")
    assert before["ranges"] == {"globex"} and "globex" in before["layout"]  # the leak
    store = app_store(postgres.app_dsn, table=name, embedder=HashingEmbedder(32))
    await store.put(("acme", "facts"), "k", "migrated at first use, as the owner")
    assert await seen(postgres.app_dsn, table, "acme") == {
        "layout": {""},
        "jobs": set(),
        "ranges": set(),
    }
    assert await seen(postgres.app_dsn, table, "globex") == {
        "layout": {"", "globex"},
        "jobs": {"globex"},
        "ranges": {"globex"},
    }
    assert await unreadable(postgres.app_dsn, table, "globex") == OPERATORS
    await store.close()

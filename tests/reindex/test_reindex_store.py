"""Online reindex through the Python API, batches run in-process (no send): slots,
dual writes, the atomic switch, finalize, and refusals. Real Postgres throughout."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import asyncpg
import numpy as np
import pytest
from pgvector.asyncpg import register_vector

from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.errors import EmbeddingError
from tulip_memory.reindex import ReindexConflict, Reindexer, ReindexError, graphs
from tulip_memory.reindex.graphs import Graphs
from tulip_memory.reindex.phases import PHASES
from tulip_memory.reindex.reindexer import BUILD_MEMORY_MB, build_resources
from tulip_memory.store import PgMemory
from tulip_memory.store.fusion import HybridRanking
from tulip_memory.store.postgres import plan
from tulip_memory.store.postgres.store import TurnsIn
from tulip_memory.store.postgres.writer import TurnRow

#: Pure cosine order, so which model ranked a result is visible in the result.
VECTORS_ONLY = HybridRanking(lexical_weight=0.0, vector_weight=1.0)
OLD, NEW = "hashing:32", "hashing:48"


@dataclass
class Table:
    name: str
    app_dsn: str
    admin_dsn: str

    def store(self) -> PgMemory:
        return app_store(
            self.app_dsn, table=self.name, embedder=HashingEmbedder(32), ranking=VECTORS_ONLY
        )

    async def hnsw(self, suffix: str = "") -> set[str]:
        """The table's (or ``<table><suffix>``'s) HNSW indexes, by the column they index
        (each over the slot's halfvec expression, the one recall's index path orders by)."""
        rows = await self.admin(
            "SELECT a.attname, pg_get_indexdef(i.indexrelid) AS def "
            "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_am am ON am.oid = c.relam "
            "JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = i.indexrelid "
            "AND d.refobjid = i.indrelid AND d.refobjsubid > 0 "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = d.refobjsubid "
            "WHERE i.indrelid = $1::regclass AND am.amname = 'hnsw' AND i.indisvalid",
            self.name + suffix,
        )
        for r in rows:
            assert f"(({r['attname']})::halfvec(" in r["def"], r["def"]
            assert "halfvec_cosine_ops" in r["def"], r["def"]
        return {r["attname"] for r in rows}

    async def admin(self, query: str, *args: object) -> list[asyncpg.Record]:
        conn = await asyncpg.connect(self.admin_dsn)
        await register_vector(conn)
        try:
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()


@pytest.fixture
async def table(postgres: Postgres) -> AsyncIterator[Table]:
    yield Table(f"rx_{uuid.uuid4().hex[:10]}", postgres.app_dsn, postgres.admin_dsn)


def keeping(table: Table, store: PgMemory) -> tuple[Reindexer, list[tuple[int, int, str]]]:
    """A reindexer whose batches are kept in the list, not run."""
    sent: list[tuple[int, int, str]] = []

    def send(job_id: int, range_id: int, tenant: str) -> None:
        sent.append((job_id, range_id, tenant))

    return Reindexer(store, send=send, admin_dsn=table.admin_dsn), sent


async def fill(store: PgMemory, tenants: list[str], rows: int) -> None:
    for t in tenants:
        await store.put_batch(
            [
                ((t, "facts"), f"k{i:04d}", {"text": f"fact {i} about topic {i % 7}"}, None)
                for i in range(rows)
            ]
        )
        _, turns = await store.prepare_event(
            [],
            TurnsIn(
                (t, "turns"),
                "thread",
                "ev1",
                [TurnRow(i, f"question {i} answer {i}", {"i": i}, {}) for i in range(5)],
            ),
        )
        assert turns is not None
        async with store.transaction(t) as tx:
            await tx.write_turns(turns)


async def test_reindex_moves_every_row_and_switches_recall(table: Table) -> None:
    store = table.store()
    tenants = ["acme", "globex"]
    await fill(store, tenants, 23)
    before = [r.key for r in await store.search(("acme", "facts"), "fact 3 about topic 3")]
    reindexer = Reindexer(store, admin_dsn=table.admin_dsn)
    job = await reindexer.start(NEW, batch=5)
    assert job.status == "switched", job
    progress = await reindexer.progress(job.id)
    assert progress.ranges_done == progress.ranges == 2 * (5 + 1)  # 23 rows / 5, 5 turns
    assert job.planned_rows == 2 * (23 + 5)
    # Every row has the new vector, 48 wide, equal to what the new model gives.
    rows = await table.admin(f"SELECT content, {job.slot} AS v FROM {table.name}")
    assert len(rows) == 46 and all(r["v"] is not None for r in rows)
    want = HashingEmbedder(48).embed([rows[0]["content"]])[0]
    assert np.allclose(rows[0]["v"].to_numpy(), want, atol=1e-6)
    turns = await table.admin(f"SELECT {job.slot} AS v FROM {table.name}_turns")
    assert len(turns) == 10 and all(r["v"] is not None for r in turns)
    # Recall now ranks by the new model: the query is embedded 48 wide.
    after = await store.search_by_embedding(("acme", "facts"), [0.1] * 48)
    assert len(after) == 10
    with pytest.raises(ValueError, match="48"):
        await store.search_by_embedding(("acme", "facts"), [0.1] * 32)
    now = await store.search(("acme", "facts"), "fact 3 about topic 3")
    assert now[0].key == before[0]
    # A fresh process configured with the old model reads the new slot too.
    other = table.store()
    assert len(await other.search_turns(("globex", "turns"), "question 2", top_k=3)) == 3
    await other.close()
    # Writes after the switch still fill both slots until finalize.
    await store.put(("acme", "facts"), "late", "a late fact")
    late = await table.admin(
        f"SELECT embedding, {job.slot} AS v FROM {table.name} WHERE key = 'late'"
    )
    assert late[0]["embedding"] is not None and late[0]["v"] is not None
    # Built at the switch; the old slot's went at the start, over memories and turns
    # alike (the recall plan reads both by index).
    assert await table.hnsw() == {job.slot}
    assert await table.hnsw("_turns") == {job.slot}
    done = await reindexer.finalize()
    assert done.status == "finalized"
    assert await table.hnsw() == await table.hnsw("_turns") == {job.slot}
    cols = await table.admin(
        "SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 "
        "AND NOT attisdropped AND atttypid = 'vector'::regtype",
        table.name,
    )
    assert [c["attname"] for c in cols] == [job.slot]
    await store.put(("acme", "facts"), "later", "after finalize")
    assert len(await store.search(("acme", "facts"), "finalize")) == 10
    await store.close()


async def test_writes_during_a_job_fill_both_slots(table: Table) -> None:
    store = table.store()
    await fill(store, ["acme"], 6)
    sent: list[tuple[int, int, str]] = []
    writer = table.store()
    await writer.put(("acme", "facts"), "warm", "a write before the job: layouts cached")
    reindexer = Reindexer(
        store, send=lambda j, r, t: sent.append((j, r, t)), admin_dsn=table.admin_dsn
    )
    job = await reindexer.start(NEW, tenant="acme", batch=4)
    assert job.status == "running" and len(sent) == 4  # 7 rows + 5 turns, by 4
    # A write now, by a store whose cached layout predates the job.
    await writer.put(("acme", "facts"), "k0001", {"text": "rewritten while reindexing"})
    rows = await table.admin(
        f"SELECT embedding, {job.slot} AS v, content FROM {table.name} WHERE key = 'k0001'"
    )
    want = HashingEmbedder(48).embed([rows[0]["content"]])[0]
    assert np.allclose(rows[0]["v"].to_numpy(), want, atol=1e-6)
    # Recall still reads the old slot until the switch.
    assert len(await writer.search_by_embedding(("acme", "facts"), [0.1] * 32)) == 7
    for batch in sent:
        await reindexer.run_batch(*batch)
    # A range run twice changes nothing.
    assert (await reindexer.run_batch(*sent[0])).startswith("skipped")
    assert (await reindexer.job(job.id)).status == "switched"  # type: ignore[union-attr]
    assert len(await writer.search_by_embedding(("acme", "facts"), [0.1] * 48)) == 7
    await writer.close()
    await store.close()


async def test_refusals_name_what_is_wrong(table: Table) -> None:
    store = table.store()
    await fill(store, ["acme"], 3)
    reindexer = Reindexer(store, send=lambda j, r, t: None, admin_dsn=table.admin_dsn)
    with pytest.raises(ReindexError, match="invalid embedding model 'hashing:zero'"):
        await reindexer.start("hashing:zero", tenant="acme")
    with pytest.raises(ReindexError, match="already on 'hashing-32'"):
        await reindexer.start(OLD, tenant="acme")
    with pytest.raises(ReindexError, match=r"only the owner role may.*TULIP_DATABASE_ADMIN_URL"):
        await Reindexer(store).start(NEW, tenant="acme")
    with pytest.raises(ReindexError, match="subject to row-level security"):
        await Reindexer(store, admin_dsn=table.app_dsn).start(NEW)
    with pytest.raises(ReindexError, match="cannot act as tulip_owner"):
        await Reindexer(store, admin_dsn=table.app_dsn).start(NEW, tenant="acme")
    with pytest.raises(ReindexError, match="batch"):
        await reindexer.start(NEW, tenant="acme", batch=0)
    assert await table.hnsw() == {"embedding"}
    job = await reindexer.start(NEW, tenant="acme")
    # The other tenants' recall (the all-tenants layout) still reads the old slot, so its
    # indexes stay; an all-tenants job drops them (test_reindex_moves_every_row_...).
    assert await table.hnsw() == await table.hnsw("_turns") == {"embedding"}
    with pytest.raises(ReindexConflict, match=f"job {job.id} .* is running"):
        await reindexer.start("hashing:64", tenant="acme")
    with pytest.raises(ReindexConflict, match="may not overlap"):
        await Reindexer(store, admin_dsn=table.admin_dsn).start("hashing:64")
    # Abandon: the new slot goes, recall never left the old one.
    abandoned = await reindexer.finalize("acme")
    assert abandoned.status == "finalized" and "abandoned" in (abandoned.error or "")
    assert await table.hnsw() == {"embedding"}
    assert len(await store.search_by_embedding(("acme", "facts"), [0.1] * 32)) == 3
    await store.close()


async def test_a_store_configured_with_another_model_follows_the_table(table: Table) -> None:
    creator = table.store()  # hashing:32, recorded as the original slot's model
    await creator.put(("acme", "facts"), "a", "the first fact")
    newer = app_store(table.app_dsn, table=table.name, embedder=HashingEmbedder(48))
    await newer.put(("acme", "facts"), "b", "the second fact")
    rows = await table.admin(f"SELECT content, embedding FROM {table.name} WHERE key = 'b'")
    want = HashingEmbedder(32).embed([rows[0]["content"]])[0]
    assert np.allclose(rows[0]["embedding"].to_numpy(), want, atol=1e-6)
    hits = await newer.search(("acme", "facts"), "second fact")
    assert hits[0].key == "b"
    await newer.close()
    await creator.close()


async def test_an_unrebuildable_model_is_named_not_mixed(postgres: Postgres) -> None:
    name = f"rx_{uuid.uuid4().hex[:10]}"
    hrr = app_store(postgres.app_dsn, table=name, dim=16)  # HRR: 32 wide, no model string
    await hrr.put(("acme", "facts"), "a", "a fact")
    other = app_store(postgres.app_dsn, table=name, embedder=HashingEmbedder(32))
    with pytest.raises(EmbeddingError, match=r"holds vectors of 'hrr-16'.* configure 'hrr-16'"):
        await other.put(("acme", "facts"), "b", "another fact")
    assert await other.get(("acme", "facts"), "b") is None
    await other.close()
    await hrr.close()


async def test_cancel_stops_batches_and_resume_goes_on(table: Table) -> None:
    store = table.store()
    await fill(store, ["acme"], 12)
    reindexer, sent = keeping(table, store)
    job = await reindexer.start(NEW, tenant="acme", batch=4)
    await reindexer.run_batch(*sent[0])
    cancelled = await reindexer.cancel("acme")
    assert cancelled.status == "cancelled"
    assert (await reindexer.run_batch(*sent[1])).startswith("skipped: job")
    progress = await reindexer.progress(job.id)
    assert (progress.ranges_done, progress.ranges, progress.finished) == (1, 5, True)
    sent.clear()
    resumed = await reindexer.resume("acme")
    assert resumed.status == "running" and len(sent) == 4  # only the pending ranges
    for batch in sent:
        await reindexer.run_batch(*batch)
    assert (await reindexer.progress(job.id)).job.status == "switched"
    with pytest.raises(ReindexError, match="already switched"):
        await reindexer.resume("acme")
    await store.close()


async def test_finalizing_one_tenant_keeps_the_others_vectors(table: Table) -> None:
    store = table.store()
    await fill(store, ["acme", "globex"], 5)
    reindexer = Reindexer(store, admin_dsn=table.admin_dsn)
    job = await reindexer.start(NEW, tenant="acme")
    assert job.status == "switched"
    # globex's recall still reads the old slot: its indexes stayed through the job.
    assert await table.hnsw() == await table.hnsw("_turns") == {"embedding", job.slot}
    await reindexer.finalize("acme")
    rows = await table.admin(
        f"SELECT tenant, embedding IS NOT NULL AS old, {job.slot} IS NOT NULL AS new "
        f"FROM {table.name}"
    )
    assert {(r["tenant"], r["old"], r["new"]) for r in rows} == {
        ("acme", False, True),
        ("globex", True, False),
    }
    # Both slots are still read by someone, so both keep their indexes.
    assert await table.hnsw() == await table.hnsw("_turns") == {"embedding", job.slot}
    # Each tenant's recall reads its own slot, at its own width.
    assert len(await store.search_by_embedding(("acme", "facts"), [0.1] * 48)) == 5
    assert len(await store.search_by_embedding(("globex", "facts"), [0.1] * 32)) == 5
    await store.put(("acme", "facts"), "new", "written after finalize")
    new = await table.admin(
        f"SELECT embedding, {job.slot} AS v FROM {table.name} WHERE key = 'new'"
    )
    assert new[0]["embedding"] is None and new[0]["v"] is not None
    await store.close()


async def test_a_write_waiting_on_a_job_start_fills_the_new_slot(table: Table) -> None:
    """The race the layout lock exists for: a write whose transaction waits while a
    job start holds the lock must write the slot that start added, though it began
    (and its store cached the layout) before the start committed."""
    store, writer = table.store(), table.store()
    await fill(store, ["acme"], 3)
    await writer.put(("acme", "facts"), "warm", "layouts cached before the job")
    blocker = await asyncpg.connect(table.admin_dsn)
    tx = blocker.transaction()
    await tx.start()
    await blocker.execute(f"LOCK TABLE {table.name} IN ACCESS SHARE MODE")
    starting = asyncio.ensure_future(
        Reindexer(store, send=lambda j, r, t: None, admin_dsn=table.admin_dsn).start(
            NEW, tenant="acme"
        )
    )
    await wait_for_waiter(table, "ALTER TABLE")  # the start holds the layout lock
    writing = asyncio.ensure_future(writer.put(("acme", "facts"), "racer", "written in the race"))
    await wait_for_waiter(table, "pg_advisory_xact_lock_shared")
    await tx.commit()
    await blocker.close()
    job = await starting
    await writing
    rows = await table.admin(f"SELECT {job.slot} AS v FROM {table.name} WHERE key = 'racer'")
    assert rows[0]["v"] is not None
    await writer.close()
    await store.close()


async def wait_for_waiter(table: Table, statement: str) -> None:
    for _ in range(200):
        rows = await table.admin(
            "SELECT 1 FROM pg_stat_activity WHERE wait_event_type IN ('Lock', 'LWLock') "
            "AND position($1 in query) > 0",
            statement,
        )
        if rows:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing waits in {statement!r}")


async def test_the_old_slots_index_stays_where_recall_reads_it(table: Table) -> None:
    """A namespace big enough for the HNSW graph keeps the old slot's HNSW index over
    its table for the whole job (its recall would scan every row without it); the
    turns', whose namespaces are all small, goes for the job as ever."""
    store = table.store()
    await fill(store, ["acme"], 3)
    big = ("acme", "big")
    rows = plan.GRAPH_MIN_ROWS
    await store.put_batch(
        [(big, f"b{i:05d}", {"text": f"note {i} on {i % 11}"}, None) for i in range(rows)]
    )
    reindexer, sent = keeping(table, store)
    job = await reindexer.start(NEW, batch=1_000)
    assert await table.hnsw() == {"embedding"}
    assert await table.hnsw("_turns") == set()
    assert len(await store.search(big, "note 7 on 7")) == 10
    assert store.plans[plan.INDEX] == 1
    for batch in sent:
        await reindexer.run_batch(*batch)
    assert (await reindexer.job(job.id)).status == "switched"  # type: ignore[union-attr]
    assert await table.hnsw() == {"embedding", job.slot}
    assert await table.hnsw("_turns") == {job.slot}
    await reindexer.finalize()
    assert await table.hnsw() == {job.slot}
    await store.close()


async def test_a_big_namespaces_own_graph_follows_the_reindex(table: Table) -> None:
    """A namespace with a graph of its own gets one over the new slot in the job's
    index phase, before recall switches to it, and loses the old slot's at finalize."""
    store = table.store()
    big, rows = ("acme", "big"), graphs.MIN_ROWS
    await store.put_batch([(big, f"b{i:05d}", f"note {i} on {i % 11}", None) for i in range(rows)])
    for part in ("a", "b"):  # so that the big namespace is under half of its table
        await store.put_batch(
            [(("acme", part), f"k{i:05d}", f"other {i}", None) for i in range(rows // 2 + 1)]
        )
    first = await Graphs(store, table.admin_dsn).refresh()
    assert [(g.ns, g.slot) for g in first.built] == [("acme\x1fbig", "embedding")]
    reindexer, sent = keeping(table, store)
    job = await reindexer.start(NEW, batch=5_000)
    for batch in sent:
        await reindexer.run_batch(*batch)
    assert (await reindexer.job(job.id)).status == "switched"  # type: ignore[union-attr]
    assert await _registered(table) == [("embedding", True), (job.slot, True)]
    assert len(await store.search(big, "note 7 on 7")) == 10
    assert store.plans == {plan.OWN: 1}
    await reindexer.finalize()
    assert await _registered(table) == [(job.slot, True)]
    assert len(await store.search(big, "note 7 on 7")) == 10
    assert store.plans == {plan.OWN: 2}
    await store.close()


async def _registered(table: Table) -> list[tuple[str, bool]]:
    rows = await table.admin(f"SELECT slot, ready FROM {table.name}_graphs ORDER BY id")
    return [(r["slot"], r["ready"]) for r in rows]


def test_an_index_build_gets_the_memory_its_graph_needs() -> None:
    assert build_resources(0, 384, 8, 2) == (BUILD_MEMORY_MB[0], 2)  # the server's setting
    memory, workers = build_resources(1_000_000, 384, 8, 8)
    assert 1_500 < memory <= BUILD_MEMORY_MB[1] and workers == 4
    assert build_resources(10**9, 384, 2, 2) == (BUILD_MEMORY_MB[1], 0)
    assert build_resources(10**4, 384, 8, 0)[1] == 0


class Recorder:
    """A phase observer that records each phase with the phases it ran inside (in its
    own asyncio task: the batches in flight at once each have theirs)."""

    def __init__(self) -> None:
        self.path: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
            "path", default=()
        )
        self.seen: list[tuple[str, ...]] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        token = self.path.set((*self.path.get(), name))
        self.seen.append(self.path.get())
        try:
            yield
        finally:
            self.path.reset(token)


async def test_an_observer_sees_every_phase_of_an_in_process_job(table: Table) -> None:
    store = table.store()
    await fill(store, ["acme"], 7)
    recorder = Recorder()
    job = await Reindexer(store, admin_dsn=table.admin_dsn, observer=recorder).start(NEW, batch=5)
    assert job.status == "switched" and recorder.path.get() == ()
    assert {path[-1] for path in recorder.seen} == set(PHASES)
    for inner in ("probe", "create", "plan"):
        assert ("start", inner) in recorder.seen
    batch = next(p for p in recorder.seen if p[-1] == "batch")
    for inner in ("rows", "embed", "write", "pace"):
        assert (*batch, inner) in recorder.seen
    assert ("finish", "index") in [p[-2:] for p in recorder.seen]
    await store.close()

"""Invariant 6 at scale: recall is complete everywhere and sublinear on big namespaces.

One table where a tenant holds 100,000 rows in one namespace, 30 tenants hold 1-50,
namespaces of 5,000 and 12,000 rows are too small a share of the table for the HNSW
graph (the index path reads their vectors by a scan of their own rows, until the
12,000 get a graph of their own), and one of 20,000 rows keeps its vectors where a
search near the query never reaches them (opposite the query, beyond the iterative
scan's ``max_scan_tuples``).
The same shapes fill the turns table. Everything is read through the application
role under forced row-level security. The tests assert on the path the store chose
(its ``plans`` counter, and EXPLAIN of the index statement), never on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
import numpy as np
import pytest

from tests.store.test_pg_hybrid import write_turns
from tests.support.services import Postgres
from tulip_memory.embeddings import HRREncoder
from tulip_memory.reindex.graphs import Graph, Graphs, Refreshed
from tulip_memory.store import PgMemory
from tulip_memory.store.fusion import HybridRanking
from tulip_memory.store.postgres import plan, slots, sql
from tulip_memory.store.validation import NS_SEP

DIM = 8  # HRR: 16-wide vectors keep the 100,000-row fixture quick to build
# RARE: big enough for the HNSW graph (plan.choose), MID for the index path only, OWN
# too small a share of the table for its graph but big enough for a graph of its own
BIG, RARE, MID, OWN = 100_000, 20_000, 5_000, 12_000
SMALL = [1 + (i * 7) % 50 for i in range(30)]
START = datetime(2026, 1, 1, tzinfo=UTC)
QUERIES = ["alpha5 beta7", "gamma11", "alpha40 gamma2 beta3", "beta88", "alpha1 beta2"]
RANKING = HybridRanking(lexical_weight=0.5, vector_weight=0.5)


@dataclass(frozen=True)
class Fixture:
    table: str
    app_dsn: str
    admin_dsn: str

    def store(self, recall_plan: str = "auto", ranking: HybridRanking = RANKING) -> PgMemory:
        return PgMemory(
            self.app_dsn,
            migrator=self.admin_dsn,
            table=self.table,
            dim=DIM,
            ranking=ranking,
            recall_plan=recall_plan,  # type: ignore[arg-type]
        )


BIG_NS: tuple[str, ...] = ("bigco", "facts")
RARE_NS: tuple[str, ...] = ("rareco", "facts")
MID_NS: tuple[str, ...] = ("midco", "facts")
OWN_NS: tuple[str, ...] = ("ownco", "facts")
SMALL_NS: list[tuple[str, ...]] = [(f"small{j}", "facts") for j in range(len(SMALL))]
SIZES = {
    BIG_NS: BIG,
    RARE_NS: RARE,
    MID_NS: MID,
    OWN_NS: OWN,
    **dict(zip(SMALL_NS, SMALL, strict=True)),
}


@pytest.fixture(scope="module")
def scale(postgres: Postgres) -> Fixture:
    fx = Fixture(f"scale_{uuid.uuid4().hex[:8]}", postgres.app_dsn, postgres.admin_dsn)
    with ThreadPoolExecutor(1) as pool:  # a loop of its own, whatever the test's is
        pool.submit(asyncio.run, build(fx)).result()
    return fx


def _away() -> list[float]:
    """The direction opposite the first query's encoding (the rare namespace's
    vectors): the last rows a scan near that query reaches."""
    q = np.asarray(HRREncoder(DIM).embed([QUERIES[0]])[0], dtype=np.float64)
    return [float(x) for x in -q / np.linalg.norm(q)]


# $1 tenant, $2 namespace, $3 rows, $4 content template kind, $5 direction (NULL: random)
_ROWS = """
SELECT $1::text, $2::text, i,
       CASE WHEN $4 THEN 'alpha' || (i % 97) || ' beta' || (i % 89) || ' gamma' || (i % 83)
            ELSE 'zeta' || (i % 50) || ' omega' || (i % 7) END,
       CASE WHEN $5::float8[] IS NULL
            THEN (SELECT array_agg(random() - 0.5) FROM generate_series(1, {w}) WHERE i > 0)
            ELSE (SELECT array_agg(d + (random() - 0.5) * 0.05) FROM unnest($5) d WHERE i > 0)
       END::vector
FROM generate_series(1, $3) i"""


async def build(fx: Fixture) -> None:
    setup = fx.store()
    await setup.put(("warmup", "x"), "k", "v")  # runs the migrations
    await setup.close()
    t, w = f"public.{fx.table}", 2 * DIM
    rows = _ROWS.format(w=w)
    admin = await asyncpg.connect(fx.admin_dsn)
    try:
        await admin.execute(f"DROP INDEX public.{fx.table}_hnsw, public.{fx.table}_turns_hnsw")
        away = _away()
        for ns, n in SIZES.items():
            lexical, direction = ns != RARE_NS, away if ns == RARE_NS else None
            name = NS_SEP.join(ns)
            await admin.execute(
                f"""INSERT INTO {t} (tenant, ns, key, value, content, embedding)
                SELECT r.tenant, r.ns, 'k' || r.i, to_jsonb(r.content), r.content, r.v
                FROM ({rows}) AS r(tenant, ns, i, content, v)""",
                ns[0],
                name,
                n,
                lexical,
                direction,
            )
            await admin.execute(
                f"""INSERT INTO {t}_turns (tenant, ns, thread_id, event_id, position, text,
                                           turn, embedding, source_seq, created_at)
                SELECT r.tenant, r.ns, 'th', 'e' || (r.i / 100), r.i % 100, r.content,
                       jsonb_build_object('user', r.content), r.v, r.i,
                       $6::timestamptz + r.i * interval '1 minute'
                FROM ({rows}) AS r(tenant, ns, i, content, v)""",
                ns[0],
                name,
                n,
                lexical,
                direction,
                START,
            )
        await admin.execute("SET maintenance_work_mem = '256MB'")
        # Graphs half as wide and deep as pgvector's defaults (m 16, ef_construction 64):
        # a quarter of the build time, and the index path still has to reach the exact
        # path's top 10 through them.
        for table, index in ((t, f"{fx.table}_hnsw"), (f"{t}_turns", f"{fx.table}_turns_hnsw")):
            await admin.execute(
                f"CREATE INDEX {index} ON {table} {slots.ann_using('embedding', w)} "
                "WITH (m = 8, ef_construction = 32)"
            )
            await admin.execute(f"ANALYZE {table}")
            # As autovacuum would, in time: statistics, and the visibility map the
            # postings' index-only scans need.
            await admin.execute(f"VACUUM ANALYZE {table}_post")
    finally:
        await admin.close()


@pytest.fixture
async def auto(scale: Fixture) -> AsyncIterator[PgMemory]:
    store = scale.store()
    yield store
    await store.close()


@pytest.fixture
async def exact(scale: Fixture) -> AsyncIterator[PgMemory]:
    store = scale.store("exact")
    yield store
    await store.close()


def _expected_paths(ns: tuple[str, ...]) -> set[str]:
    # The rare namespace is big enough for the HNSW graph, whose scan the planner may
    # swap for a sort of the namespace's rows (it knows them to be few in the table):
    # complete either way; the hostile planner below forces the graph.
    if ns == RARE_NS:
        return {plan.INDEX, plan.FALLBACK}
    return {BIG_NS: {plan.INDEX}, MID_NS: {plan.SCAN}, OWN_NS: {plan.SCAN}}.get(ns, {plan.EXACT})


def test_the_plan_follows_the_scopes_size_and_share_of_the_table() -> None:
    # Small scopes take the exact path; bigger ones the index path, whose nearest rows
    # come from the HNSW graph only where the scope is enough of its table for an
    # iterative scan to find them cheaply (it reads the other scopes' rows too).
    assert plan.choose(1_500, 1_500, 10) == plan.EXACT
    assert plan.choose(2_000, 2_000, 10) == plan.SCAN
    assert plan.choose(10_000, 10_000, 10) == plan.INDEX
    assert plan.choose(4_500, 200_000, 10) == plan.SCAN
    assert plan.choose(20_000, 200_000, 10) == plan.SCAN
    assert plan.choose(30_000, 200_000, 10) == plan.INDEX
    assert plan.choose(200_000, 220_000, 10) == plan.INDEX  # a heavy user's turns
    assert plan.choose(20_000, 1_000_000, 10) == plan.SCAN
    assert plan.choose(100_000, 1_000_000, 10) == plan.INDEX
    assert plan.choose(20_000, 100_000_000, 10) == plan.SCAN  # past max_scan_tuples
    assert plan.choose(50_000, 0, 10) == plan.INDEX  # no estimate yet: the scope alone
    assert plan.ways(plan.INDEX) == (plan.INDEX, plan.SCAN)
    assert plan.ways(plan.SCAN) == (plan.SCAN,)
    # A namespace with a graph of its own is that graph's whole table.
    assert plan.choose(20_000, 1_000_000, 10, own=True) == plan.OWN
    assert plan.choose(4_000, 1_000_000, 10, own=True) == plan.SCAN
    assert plan.choose(1_500, 1_000_000, 10, own=True) == plan.EXACT
    assert plan.ways(plan.OWN) == (plan.OWN, plan.SCAN)


@pytest.mark.parametrize("what", ["memories", "turns"])
async def test_every_namespace_is_complete_on_the_path_its_size_picks(
    auto: PgMemory, what: str
) -> None:
    for ns, rows in SIZES.items():
        before = auto.plans.copy()
        if what == "memories":
            got: list[object] = list(await auto.search(ns, QUERIES[0], limit=10))
        else:
            got = list(await auto.search_turns(ns, QUERIES[0], top_k=10))
        assert len(got) == min(10, rows), ns
        taken = auto.plans - before
        assert sum(taken.values()) == 1 and set(taken) <= _expected_paths(ns), (ns, taken)


async def test_matches_rarer_than_the_graph_reaches_fall_back_to_the_scopes_scan(
    scale: Fixture,
) -> None:
    # Sorts priced out, as stale statistics might: the planner takes the HNSW scan,
    # which stops at max_scan_tuples before it reaches the namespace's rows; the
    # namespace's own rows, scanned, answer instead.
    dsn = scale.app_dsn + ("&" if "?" in scale.app_dsn else "?") + "enable_sort=off"
    store = PgMemory(dsn, table=scale.table, dim=DIM, ranking=RANKING)
    try:
        got = await store.search(RARE_NS, QUERIES[0], limit=10)
        turns = await store.search_turns(RARE_NS, QUERIES[0], top_k=10)
    finally:
        await store.close()
    assert len(got) == 10 and len(turns) == 10
    assert store.plans == {plan.FALLBACK: 2}


async def test_counters_follow_writes_and_deletes(auto: PgMemory) -> None:
    ns = ("small0", "facts")
    assert len(await auto.search(ns, "alpha", limit=100)) == SMALL[0]
    await auto.put(ns, "extra", "alpha beta extra")
    async with auto.transaction(ns[0]) as tx:
        counted = await tx.conn.fetchval(
            f"SELECT rows FROM public.{auto.table_name}_ns_stats WHERE tenant = $1 AND ns = $2",
            ns[0],
            NS_SEP.join(ns),
        )
    assert counted == SMALL[0] + 1
    assert await auto.delete(ns, "extra")
    async with auto.transaction(ns[0]) as tx:
        counted = await tx.conn.fetchval(
            f"SELECT rows FROM public.{auto.table_name}_ns_stats WHERE tenant = $1 AND ns = $2",
            ns[0],
            NS_SEP.join(ns),
        )
    assert counted == SMALL[0]


async def test_small_namespaces_equal_the_exact_path(auto: PgMemory, exact: PgMemory) -> None:
    for ns in SMALL_NS[:10]:
        for query in QUERIES[:2]:
            got = [i.key for i in await auto.search(ns, query, limit=10)]
            want = [i.key for i in await exact.search(ns, query, limit=10)]
            assert got == want


async def test_big_namespace_reaches_the_exact_paths_top_10(
    auto: PgMemory, exact: PgMemory
) -> None:
    hits = total = 0
    for query in QUERIES:
        want = {i.key for i in await exact.search(BIG_NS, query, limit=10)}
        got = {i.key for i in await auto.search(BIG_NS, query, limit=10)}
        hits, total = hits + len(want & got), total + len(want)
        want_t = {t.text + str(t.position) for t in await exact.search_turns(BIG_NS, query, 10)}
        got_t = {t.text + str(t.position) for t in await auto.search_turns(BIG_NS, query, 10)}
        hits, total = hits + len(want_t & got_t), total + len(want_t)
    assert auto.plans[plan.INDEX] == 2 * len(QUERIES)
    assert hits / total >= 0.95


async def test_turns_of_a_time_window_are_complete_and_found_by_the_time_index(
    auto: PgMemory, scale: Fixture
) -> None:
    since, until = START + timedelta(minutes=5_000), START + timedelta(minutes=5_030)
    got = await auto.search_turns(BIG_NS, QUERIES[0], top_k=50, since=since, until=until)
    assert len(got) == 30  # the window's turns, though few of them match the query
    assert {t.position for t in got} == {i % 100 for i in range(5_000, 5_030)}
    open_end = await auto.search_turns(SMALL_NS[3], QUERIES[0], top_k=50, until=until)
    assert len(open_end) == SMALL[3]
    with pytest.raises(ValueError, match="timezone-aware"):
        await auto.search_turns(BIG_NS, "x", since=datetime(2026, 1, 1))
    statement = slots.read_sql(auto.statement("SEARCH_TURNS"), "embedding")
    args = (BIG_NS[0], NS_SEP.join(BIG_NS), 10, None, QUERIES[0], "english")
    shown = await _explain(scale, statement, (*args, 0.5, 0.5, 1.2, 0.4, None, since, until))
    assert f"Index Scan using {scale.table}_turns_ns" in shown or (
        f"Bitmap Index Scan on {scale.table}_turns_ns" in shown
    ), shown
    assert "created_at >=" in shown


async def test_the_index_path_reads_the_hnsw_index_and_the_postings_under_rls(
    auto: PgMemory, scale: Fixture
) -> None:
    # bm25 runs on an index-only scan of the postings' primary key; the wide rows are
    # read by key for the candidates only; and neither needs `@@` to be leakproof (as it
    # is not by default, and cannot be made on managed servers).
    async with _match_not_leakproof(scale.admin_dsn):
        await auto.search(BIG_NS, "warm", limit=1)  # the pool, and the server's capabilities
        assert auto.plans[plan.INDEX] >= 1
        for shown, prefix in await _explain_the_index_path(auto, scale):
            assert f"Index Scan using {prefix}_hnsw" in shown, shown


_MATCH = "pg_catalog.ts_match_vq(tsvector, tsquery)"


@contextlib.asynccontextmanager
async def _match_not_leakproof(admin_dsn: str) -> AsyncIterator[None]:
    conn = await asyncpg.connect(admin_dsn)
    try:
        was = await conn.fetchval(
            f"SELECT proleakproof FROM pg_proc WHERE oid = '{_MATCH}'::regprocedure"
        )
        await conn.execute(f"ALTER FUNCTION {_MATCH} NOT LEAKPROOF")
        try:
            yield
        finally:
            if was:
                await conn.execute(f"ALTER FUNCTION {_MATCH} LEAKPROOF")
    finally:
        await conn.close()


def _indexed(store: PgMemory, stmt: str, way: str) -> str:
    """Index statement ``stmt`` of ``store``, its nearest rows found ``way``."""
    return slots.read_sql(sql.nearest(store.statement(stmt), way), "embedding", 2 * DIM)


async def _explain_the_index_path(
    auto: PgMemory, scale: Fixture, ns: tuple[str, ...] = BIG_NS, way: str = plan.INDEX
) -> list[tuple[str, str]]:
    """EXPLAIN of both index statements over ``ns``, their nearest rows found ``way``,
    each with its table's name; asserted to read bm25 from the postings' index only."""
    q = HRREncoder(DIM).embed([QUERIES[0]])[0]
    base = (ns[0], NS_SEP.join(ns), 10, q, QUERIES[0], "english", 0.5, 0.5, 1.2, 0.4)
    lexical = plan.index_args(10)
    out = []
    for stmt, args, prefix in (
        ("SEARCH_INDEXED", (*base, False, *lexical), scale.table),
        ("SEARCH_TURNS_INDEXED", (*base, None, None, None, *lexical), f"{scale.table}_turns"),
    ):
        shown = await _explain(scale, _indexed(auto, stmt, way), args)
        assert f"Index Only Scan using {prefix}_post_pkey" in shown, shown
        assert "tsv" not in shown, shown
        out.append((shown, prefix))
    return out


async def _explain(
    fx: Fixture, statement: str, args: tuple[object, ...], *, analyze: bool = False
) -> str:
    from pgvector.asyncpg import register_vector

    conn = await asyncpg.connect(fx.app_dsn)
    try:
        await register_vector(conn)
        async with conn.transaction():
            await conn.execute("SELECT set_config('tulip.tenant', $1, true)", args[0])
            await conn.execute(sql.PLAN_SETTINGS, "100", "20000")
            shown = "EXPLAIN (ANALYZE, COSTS OFF) " if analyze else "EXPLAIN "
            rows = await conn.fetch(shown + statement, *args)
        return "\n".join(r[0] for r in rows)
    finally:
        await conn.close()


async def test_a_mid_namespace_scans_its_own_vectors_and_equals_the_exact_path(
    auto: PgMemory, exact: PgMemory, scale: Fixture
) -> None:
    # 5,000 rows, 4% of the table: an iterative scan of the graph would read ~25 other
    # scopes' rows for each of its own, so its nearest rows come from its B-tree range,
    # each cosine exact; bm25 still comes from the postings, not from its rows.
    for query in QUERIES:
        got = [i.key for i in await auto.search(MID_NS, query, limit=10)]
        assert got == [i.key for i in await exact.search(MID_NS, query, limit=10)], query
        got_t = [(t.position, t.text) for t in await auto.search_turns(MID_NS, query, 10)]
        want_t = [(t.position, t.text) for t in await exact.search_turns(MID_NS, query, 10)]
        assert got_t == want_t, query
    assert auto.plans == {plan.SCAN: 2 * len(QUERIES)}
    for shown, _ in await _explain_the_index_path(auto, scale, MID_NS, plan.SCAN):
        assert "_hnsw" not in shown and "Seq Scan" not in shown, shown


async def test_small_turn_namespaces_equal_the_exact_path(auto: PgMemory, exact: PgMemory) -> None:
    for ns in SMALL_NS[:10]:
        for query in QUERIES[:2]:
            got = [(t.position, t.text) for t in await auto.search_turns(ns, query, top_k=10)]
            want = [(t.position, t.text) for t in await exact.search_turns(ns, query, top_k=10)]
            assert got == want


async def test_a_word_rare_in_a_big_namespace_still_ranks_first_and_the_rest_completes(
    auto: PgMemory, exact: PgMemory
) -> None:
    # Three postings of the word among 100,000 rows: the lexical side finds them
    # through the postings' index, the HNSW side fills the other seven places.
    rare = [f"zyzzyva note {i}" for i in range(3)]
    await auto.put_batch([(BIG_NS, f"rare{i}", text, None) for i, text in enumerate(rare)])
    await write_turns(auto, BIG_NS, rare)
    try:
        before = auto.plans.copy()
        got = [i.key for i in await auto.search(BIG_NS, "zyzzyva", limit=10)]
        turns = [t.text for t in await auto.search_turns(BIG_NS, "zyzzyva", top_k=10)]
        assert auto.plans - before == {plan.INDEX: 2}
        want = [i.key for i in await exact.search(BIG_NS, "zyzzyva", limit=10)]
        want_t = [t.text for t in await exact.search_turns(BIG_NS, "zyzzyva", top_k=10)]
    finally:
        async with auto.transaction(BIG_NS[0]) as tx:
            t = f"public.{auto.table_name}"
            await tx.conn.execute(f"DELETE FROM {t} WHERE key LIKE 'rare%'")
            await tx.conn.execute(f"DELETE FROM {t}_turns WHERE event_id = 'event-1'")
    assert len(got) == 10 and len(turns) == 10
    assert set(got[:3]) == set(want[:3]) == {"rare0", "rare1", "rare2"}
    assert set(turns[:3]) == set(want_t[:3]) == set(rare)


async def test_a_near_row_outside_the_best_lexical_matches_keeps_its_bm25(
    auto: PgMemory, exact: PgMemory
) -> None:
    # ~1,030 rows hold "alpha5" among three words, tied on bm25; the planted row holds
    # it among four (a lower bm25: outside the best lexical matches) at the query's own
    # vector (the nearest row). Its fused score needs both halves: the index path
    # reads its bm25 from its postings, as one of the nearest rows.
    query, text = "alpha5", "alpha5 delta1 delta2 delta3"
    vector = [float(x) for x in HRREncoder(DIM).embed([query])[0]]
    t = f"public.{auto.table_name}"
    async with auto.transaction(BIG_NS[0]) as tx:
        await tx.conn.execute(
            f"INSERT INTO {t} (tenant, ns, key, value, content, embedding)"
            " VALUES ($1, $2, 'planted', to_jsonb($3::text), $3, $4::float4[]::vector)",
            BIG_NS[0],
            NS_SEP.join(BIG_NS),
            text,
            vector,
        )
        await tx.conn.execute(
            f"INSERT INTO {t}_turns (tenant, ns, thread_id, event_id, position, text, turn,"
            " embedding, source_seq, created_at) VALUES ($1, $2, 'th', 'planted', 0, $3,"
            " jsonb_build_object('user', $3::text), $4::float4[]::vector, 0, $5)",
            BIG_NS[0],
            NS_SEP.join(BIG_NS),
            text,
            vector,
            START,
        )
    try:
        before = auto.plans.copy()
        got = [i.key for i in await auto.search(BIG_NS, query, limit=10)]
        turns = [t.text for t in await auto.search_turns(BIG_NS, query, top_k=10)]
        assert auto.plans - before == {plan.INDEX: 2}
        want = [i.key for i in await exact.search(BIG_NS, query, limit=10)]
        want_t = [t.text for t in await exact.search_turns(BIG_NS, query, top_k=10)]
    finally:
        async with auto.transaction(BIG_NS[0]) as tx:
            await tx.conn.execute(f"DELETE FROM {t} WHERE key = 'planted'")
            await tx.conn.execute(f"DELETE FROM {t}_turns WHERE event_id = 'planted'")
    assert "planted" in want[:3] and text in want_t[:3]
    assert got.index("planted") == want.index("planted")
    assert turns.index(text) == want_t.index(text)


async def test_postings_are_read_by_lexeme_before_the_table_is_analysed(
    auto: PgMemory, scale: Fixture
) -> None:
    # Right after a bulk load the postings have no statistics. Every read of them must
    # still look each lexeme up in the index, not scan the scope's postings and filter
    # (a 30,000-turn namespace: 624 ms a query against 10 once kept to lexemes).
    admin = await asyncpg.connect(scale.admin_dsn)
    posts = [f"public.{scale.table}_post", f"public.{scale.table}_turns_post"]
    try:
        for table in posts:
            await admin.execute("DELETE FROM pg_statistic WHERE starelid = $1::regclass", table)
        q = HRREncoder(DIM).embed([QUERIES[2]])[0]
        base = (BIG_NS[0], NS_SEP.join(BIG_NS), 10, q, QUERIES[2], "english", 0.5, 0.5, 1.2, 0.4)
        lexical = plan.index_args(10)
        # The rare lexemes' sum, the others' lookups by key and their stream against
        # the partial matches, every lexeme's sum (read when the cut does not hold), the
        # nearest rows' bm25; and the df of a window's turns, which no counter holds.
        for stmt, args, reads in (
            ("SEARCH_INDEXED", (*base, False, *lexical), 5),
            ("SEARCH_TURNS_INDEXED", (*base, None, None, None, *lexical), 5),
            ("SEARCH_TURNS_INDEXED", (*base, None, START, None, *lexical), 6),
        ):
            statement = _indexed(auto, stmt, plan.INDEX)
            shown = await _explain(scale, statement, args)
            lines = shown.splitlines()
            scans = [i for i, line in enumerate(lines) if "_post_pkey" in line]
            assert len(scans) == reads, shown
            for i in scans:
                cond = next(x for x in lines[i + 1 :] if "Index Cond" in x or "Recheck" in x)
                assert "lexeme =" in cond, shown
    finally:
        for table in posts:
            await admin.execute(f"ANALYZE {table}")
        await admin.close()


# 4,500 rows of "often" (more postings than plan.ESSENTIAL_POSTINGS), with random vectors.
_OFTEN = """
SELECT $1, $2, 'often' || i, to_jsonb(c), c,
       (SELECT array_agg(random() - 0.5) FROM generate_series(1, $3) WHERE i > 0)::vector
FROM generate_series(1, 4500) i, LATERAL (SELECT 'often alpha' || (i % 97) AS c) x"""
_PLANTED_QUERY = "zephyr often"


async def _planted_search(
    scale: Fixture, rows: str, ranking: HybridRanking = RANKING
) -> tuple[list[str], list[str], list[str]]:
    """The big namespace with :data:`_OFTEN` and ``rows`` planted (``UNION ALL``
    branches over ``$1`` tenant, ``$2`` namespace, ``$3`` vector width, ``$4`` the
    query, ``$5`` its vector; keys starting ``zephyr``), searched for
    :data:`_PLANTED_QUERY` under ``ranking`` on the auto and the exact path, with
    EXPLAIN ANALYZE of the index statement; then removed."""
    ns, query = BIG_NS, _PLANTED_QUERY
    auto, exact = scale.store(ranking=ranking), scale.store("exact", ranking=ranking)
    vector = [float(x) for x in HRREncoder(DIM).embed([query])[0]]
    t = f"public.{auto.table_name}"
    insert = f"INSERT INTO {t} (tenant, ns, key, value, content, embedding) {_OFTEN} {rows}"
    async with auto.transaction(ns[0]) as tx:
        await tx.conn.execute(insert, ns[0], NS_SEP.join(ns), 2 * DIM, query, vector)
    try:
        got = [i.key for i in await auto.search(ns, query, limit=10)]
        assert auto.plans == {plan.INDEX: 1}
        want = [i.key for i in await exact.search(ns, query, limit=10)]
        q = vector if ranking.vector_weight else None
        weights = (ranking.lexical_weight, ranking.vector_weight, ranking.k1, ranking.b)
        args = (ns[0], NS_SEP.join(ns), 10, q, query, "english", *weights)
        statement = _indexed(auto, "SEARCH_INDEXED", plan.INDEX)
        shown = await _explain(scale, statement, (*args, False, *plan.index_args(10)), analyze=True)
    finally:
        async with auto.transaction(ns[0]) as tx:
            await tx.conn.execute(f"DELETE FROM {t} WHERE key ~ '^(often|zephyr)'")
        await auto.close()
        await exact.close()
    return got, want, shown.splitlines()


def _cte(lines: list[str], name: str) -> str:
    """The first line of CTE ``name``'s plan."""
    return lines[lines.index(f"  CTE {name}") + 1]


async def test_a_common_word_is_looked_up_only_for_the_rare_words_matches(
    scale: Fixture,
) -> None:
    # 20 more rows hold "zephyr" too, at the query's own vector. MaxScore's cut:
    # "zephyr"'s postings are summed, "often"'s looked up for those 20 rows only, and
    # since they outscore any row holding only "often", no other posting is read; the
    # ranking is the exact path's.
    got, want, lines = await _planted_search(
        scale,
        """UNION ALL
        SELECT $1, $2, 'zephyr' || i, to_jsonb($4::text), $4, $5::float4[]::vector
        FROM generate_series(10, 29) i""",
    )
    assert got == want and all(key.startswith("zephyr") for key in got)
    assert "rows=20 " in _cte(lines, "looked") and "rows=0 " in _cte(lines, "joined")
    assert "never executed" in _cte(lines, "bm"), "\n".join(lines)


async def test_many_partial_matches_are_completed_by_one_stream_of_the_common_word(
    scale: Fixture,
) -> None:
    # 3,000 rows hold "zephyr": too many partial matches to look "often" up for each,
    # so its postings are streamed once and kept where they meet one of them. Ten rows
    # are the query itself and ten as short hold "zephyr" without "often": only
    # "often"'s share ranks the first ten first (a lexical ranking: no nearest rows,
    # whose bm25 is read apart). The ranking is the exact path's, and no posting is
    # summed beyond those matches.
    got, want, lines = await _planted_search(
        scale,
        """UNION ALL
        SELECT $1, $2, 'zephyr' || i, to_jsonb(c), c, $5::float4[]::vector
        FROM generate_series(10, 29) i,
             LATERAL (SELECT CASE WHEN i < 20 THEN $4 ELSE 'zephyr gamma1' END AS c) x
        UNION ALL
        SELECT $1, $2, 'zephyr-long' || i, to_jsonb(c), c, $5::float4[]::vector
        FROM generate_series(1, 2980) i,
             LATERAL (SELECT $4 || ' gamma' || (i % 83) || ' delta' || (i % 79) AS c) x""",
        HybridRanking(lexical_weight=1.0, vector_weight=0.0),
    )
    assert got == want and sorted(got) == [f"zephyr{i}" for i in range(10, 20)]
    assert "rows=3000 " in _cte(lines, "joined") and "rows=0 " in _cte(lines, "looked")
    assert "never executed" in _cte(lines, "bm"), "\n".join(lines)


# -- namespaces' own graphs (tulip_memory.reindex.graphs) -----------------------------
# The rare namespace (20,000 rows, 14% of the table, its vectors away from the query)
# and the one of 12,000 get graphs of their own: the big one is most of its table, the
# mid one under graphs.MIN_ROWS. Requested last in this module; dropped at its end.


@pytest.fixture(scope="module")
def own_graphs(scale: Fixture) -> Iterator[Refreshed]:
    store = scale.store()
    with ThreadPoolExecutor(1) as pool:
        built = pool.submit(asyncio.run, Graphs(store, scale.admin_dsn).refresh()).result()
        yield built
        gone = pool.submit(asyncio.run, Graphs(store, scale.admin_dsn, most=0).refresh())
        assert len(gone.result().dropped) == len(built.built)
        pool.submit(asyncio.run, store.close()).result()


async def _graph_indexes(fx: Fixture) -> list[str]:
    conn = await asyncpg.connect(fx.admin_dsn)
    try:
        rows = await conn.fetch(
            "SELECT indexrelid::regclass::text AS name, indisvalid FROM pg_index"
            " WHERE indrelid IN ($1::regclass, $2::regclass) ORDER BY 1",
            f"public.{fx.table}",
            f"public.{fx.table}_turns",
        )
    finally:
        await conn.close()
    return [r["name"] for r in rows if r["name"].startswith(f"{fx.table}_own") and r["indisvalid"]]


async def test_only_a_big_namespace_that_is_a_small_share_gets_its_own_graph(
    own_graphs: Refreshed, scale: Fixture
) -> None:
    assert sorted(own_graphs.built) == [
        Graph(kind, ns[0], NS_SEP.join(ns), "embedding")
        for kind in ("memories", "turns")
        for ns in (OWN_NS, RARE_NS)
    ]
    assert len(await _graph_indexes(scale)) == 4
    # The catalog, which every role reads, holds a hash, not the tenant's name.
    conn = await asyncpg.connect(scale.app_dsn)
    try:
        defs = await conn.fetch(
            "SELECT indexdef FROM pg_indexes WHERE indexname ~ $1", f"^{scale.table}_own[0-9]+$"
        )
    finally:
        await conn.close()
    assert len(defs) == 4 and not any(t in r[0] for r in defs for t in ("rareco", "ownco"))
    again = await Graphs(scale.store(), scale.admin_dsn).refresh()
    assert again.built == again.dropped == [] and sorted(again.kept) == sorted(own_graphs.built)


async def test_a_namespace_with_its_own_graph_reads_it_and_stays_complete(
    own_graphs: Refreshed, auto: PgMemory, exact: PgMemory, scale: Fixture
) -> None:
    hits = total = 0
    for query in QUERIES:
        got = [i.key for i in await auto.search(OWN_NS, query, limit=10)]
        want = [i.key for i in await exact.search(OWN_NS, query, limit=10)]
        got_t = [(t.position, t.text) for t in await auto.search_turns(OWN_NS, query, 10)]
        want_t = [(t.position, t.text) for t in await exact.search_turns(OWN_NS, query, 10)]
        assert len(got) == len(got_t) == 10, query
        hits += len(set(got) & set(want)) + sum(t in want_t for t in got_t)
        total += len(want) + len(want_t)
        # The rare namespace's rows lie away from the query: its own graph has no
        # other rows to pass first.
        assert len(await auto.search(RARE_NS, query, limit=10)) == 10
        assert len(await auto.search_turns(RARE_NS, query, top_k=10)) == 10
    assert auto.plans == {plan.OWN: 4 * len(QUERIES)}
    assert hits / total >= 0.95
    graphs = await _graph_indexes(scale)
    for ns in (OWN_NS, RARE_NS):
        for shown, _ in await _explain_the_index_path(auto, scale, ns, plan.OWN):
            assert any(f"Index Scan using {g} " in shown for g in graphs), shown


async def test_the_application_role_reads_its_tenants_graphs_and_writes_none(
    own_graphs: Refreshed, scale: Fixture
) -> None:
    t = f"public.{scale.table}_graphs"
    conn = await asyncpg.connect(scale.app_dsn)
    try:
        for tenant, seen in ((RARE_NS[0], 2), (OWN_NS[0], 2), (BIG_NS[0], 0)):
            async with conn.transaction():
                await conn.execute("SELECT set_config('tulip.tenant', $1, true)", tenant)
                assert await conn.fetchval(f"SELECT count(*) FROM {t}") == seen
        async with conn.transaction():
            await conn.execute("SELECT set_config('tulip.tenant', $1, true)", BIG_NS[0])
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(
                    f"INSERT INTO {t} (kind, tenant, ns, slot, rows, ready)"
                    " VALUES ('memories', $1, $2, 'embedding', 1, true)",
                    BIG_NS[0],
                    NS_SEP.join(BIG_NS),
                )
    finally:
        await conn.close()


async def test_a_graph_dropped_under_its_registry_row_leaves_recall_complete(
    own_graphs: Refreshed, scale: Fixture
) -> None:
    # Its index dropped behind the registry's back: the statement reads the table's
    # graph instead, which stops at max_scan_tuples before it reaches the namespace's
    # rows (they lie away from the query); the namespace's scan answers. The next
    # refresh builds the graph again.
    gone = await _graph_indexes(scale)
    admin = await asyncpg.connect(scale.admin_dsn)
    try:
        for name in gone:
            await admin.execute(f"DROP INDEX public.{name}")
    finally:
        await admin.close()
    store = PgMemory(
        scale.app_dsn + ("&" if "?" in scale.app_dsn else "?") + "enable_sort=off",
        table=scale.table,
        dim=DIM,
        ranking=RANKING,
    )
    try:
        assert len(await store.search(RARE_NS, QUERIES[0], limit=10)) == 10
        assert len(await store.search_turns(RARE_NS, QUERIES[0], top_k=10)) == 10
    finally:
        await store.close()
    assert store.plans == {plan.FALLBACK: 2}
    again = await Graphs(scale.store(), scale.admin_dsn).refresh()
    assert sorted(again.built) == sorted(own_graphs.built)
    assert len(await _graph_indexes(scale)) == 4


async def test_hostile_names_reach_the_index_as_a_number(
    own_graphs: Refreshed, scale: Fixture
) -> None:
    # A tenant and namespace made to break out of a quoted literal: the index's
    # predicate holds the server's hash of them, never their text.
    ns = ("o'brien", "x'); DROP TABLE t; --")
    store = scale.store()
    try:
        await store.put_batch([(ns, f"k{i}", f"alpha{i} note", None) for i in range(60)])
        tiny = Graphs(store, scale.admin_dsn, min_rows=60, max_share=60 / 100_000)
        done = await tiny.refresh()
        assert [g.tenant for g in done.built] == [ns[0]]
        assert len(await store.search(ns, "alpha1", limit=10)) == 10
        assert [g.tenant for g in (await tiny.refresh()).kept] == [ns[0]]
    finally:
        await store.clear_namespace(ns)
        await store.close()
    # The other graphs went with the narrow refresh; the default one builds them back.
    again = await Graphs(scale.store(), scale.admin_dsn).refresh()
    assert [g.tenant for g in again.dropped] == [ns[0]]

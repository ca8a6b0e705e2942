"""Invariant 6: a namespace's search is complete and exactly ranked, however many
rows other tenants hold.

The table holds 60,000 rows of other tenants and a 50-row target namespace (0.08%).
The connection planner is made hostile (sorts and bitmap scans priced out, as a
planner with stale statistics might behave) so it reaches for the HNSW index
wherever the query allows it. A control query shows what that costs a plain
``ORDER BY embedding <=> q``: HNSW post-filtering returns fewer rows than asked.
The store's statements must still return exactly what an exact cosine scan returns.

The store here ranks by vectors alone (``lexical_weight=0``), the ranking these
assertions are written for; tests/store/test_pg_hybrid.py holds the default hybrid
ranking to the same completeness on the same kind of table.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import asyncpg
import numpy as np
import pytest

from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.embeddings import HRREncoder
from tulip_memory.store import PgMemory
from tulip_memory.store.fusion import HybridRanking
from tulip_memory.store.postgres import slots

OTHER_ROWS = 60_000
TARGET_ROWS = 50
DIM = 8  # HRR dim: a 16-wide vector column keeps the fixture quick to build
HOSTILE = "enable_sort=off&enable_bitmapscan=off&enable_seqscan=off"


def hostile(dsn: str) -> str:
    return dsn + ("&" if "?" in dsn else "?") + HOSTILE


@dataclass
class Fixture:
    table: str
    app_dsn: str
    admin_dsn: str
    namespace: tuple[str, ...]
    texts: dict[str, str]

    def store(self) -> PgMemory:
        vectors_only = HybridRanking(lexical_weight=0.0, vector_weight=1.0)
        return app_store(hostile(self.app_dsn), table=self.table, dim=DIM, ranking=vectors_only)


def contents() -> dict[str, str]:
    topics = ["tea", "chess", "lisbon", "nursing", "jazz", "cycling", "python"]
    return {
        f"m{i:02d}": f"fact {i} about {topics[i % 7]} and {topics[(i * 3) % 7]} number {i % 5}"
        for i in range(TARGET_ROWS)
    }


@pytest.fixture(scope="module")
def big_table(postgres: Postgres) -> Fixture:
    table = f"complete_{uuid.uuid4().hex[:8]}"
    fixture = Fixture(table, postgres.app_dsn, postgres.admin_dsn, ("target", "mem"), contents())
    with ThreadPoolExecutor(1) as pool:  # a loop of its own, whatever the test's is
        pool.submit(asyncio.run, build(fixture)).result()
    return fixture


async def build(fx: Fixture) -> None:
    table = fx.table
    setup = app_store(fx.app_dsn, table=table, dim=DIM)
    await setup.put(("warmup",), "k", "v")  # runs the migrations
    await setup.close()
    admin = await asyncpg.connect(fx.admin_dsn)
    try:
        # Bulk load without the index, then build it: far quicker than indexing per row.
        await admin.execute(f"DROP INDEX public.{table}_hnsw")
        await admin.execute(
            f"""INSERT INTO public.{table} (tenant, ns, key, value, content, embedding)
            SELECT 'other' || (g % 200), 'other' || (g % 200) || chr(31) || 'mem',
                   'k' || g, '1'::jsonb, 'filler',
                   (SELECT ('[' || string_agg((random() - 0.5)::text, ',') || ']')
                    FROM generate_series(1, {2 * DIM}) WHERE g > 0)::vector
            FROM generate_series(1, {OTHER_ROWS}) g"""
        )
        await admin.execute(
            f"CREATE INDEX {table}_hnsw ON public.{table} {slots.ann_using('embedding', 2 * DIM)} "
            "WITH (m = 4, ef_construction = 16)"
        )
    finally:
        await admin.close()
    store = fx.store()
    await store.put_batch([(fx.namespace, k, v, None) for k, v in fx.texts.items()])
    await store.close()
    admin = await asyncpg.connect(fx.admin_dsn)
    await admin.execute(f"ANALYZE public.{table}")
    await admin.close()


@pytest.fixture
async def store(big_table: Fixture) -> AsyncIterator[PgMemory]:
    s = big_table.store()
    yield s
    await s.close()


def exact_ranking(texts: dict[str, str], query: str) -> list[str]:
    enc = HRREncoder(DIM)
    keys = list(texts)
    m = enc.embed([texts[k] for k in keys])
    q = enc.embed([query])[0]
    sims = (m @ q) / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))
    return [keys[i] for i in np.argsort(-sims, kind="stable")]


async def test_control_plain_hnsw_order_returns_too_few(big_table: Fixture) -> None:
    conn = await asyncpg.connect(hostile(big_table.admin_dsn))
    try:
        table = f"public.{big_table.table}"
        q = "[" + ",".join(str(x) for x in HRREncoder(DIM).embed(["jazz tea"])[0]) + "]"
        # The order of the HNSW index: the slot's halfvec expression.
        select = (
            f"SELECT key FROM {table} WHERE tenant = 'target' "
            f"AND ns = 'target' || chr(31) || 'mem' "
            f"ORDER BY {slots.ann_expr('embedding', 2 * DIM)} <=> $1::vector::halfvec LIMIT 10"
        )
        plan = "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN {select}", q))
        assert "_hnsw" in plan
        rows = await conn.fetch(select, q)
        assert len(rows) < 10, "HNSW post-filtering no longer starves: the fixture lost its teeth"
    finally:
        await conn.close()


@pytest.mark.parametrize("limit", [1, 10, 49, 50, 200])
async def test_search_is_complete_and_exact(
    big_table: Fixture, store: PgMemory, limit: int
) -> None:
    query = "jazz and tea number 3"
    found = await store.search(big_table.namespace, query, limit=limit)
    assert len(found) == min(limit, TARGET_ROWS)
    expected = exact_ranking(big_table.texts, query)[:limit]
    assert [i.key for i in found] == expected


async def test_search_many_is_complete_per_namespace(big_table: Fixture, store: PgMemory) -> None:
    empty = ("target", "nothing-here")
    results = await store.search_many([big_table.namespace, empty], "chess", limit=20)
    assert [i.key for i in results[0]] == exact_ranking(big_table.texts, "chess")[:20]
    assert results[1] == []


async def test_search_by_embedding_is_complete_and_exact(
    big_table: Fixture, store: PgMemory
) -> None:
    q = HRREncoder(DIM).embed(["python cycling"])[0]
    hits = await store.search_by_embedding(big_table.namespace, list(q), limit=30)
    assert [h.item.key for h in hits] == exact_ranking(big_table.texts, "python cycling")[:30]
    assert all(a.score >= b.score for a, b in itertools.pairwise(hits))

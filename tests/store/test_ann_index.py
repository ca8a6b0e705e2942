"""Migration 19: every slot's HNSW index holds its vectors as ``halfvec`` (the original
slot's and a reindex's alike, each at its own width), and the recall plan's index
statements order by that very expression, so the application role's plan under forced
row-level security scans the migrated index."""

from __future__ import annotations

import uuid

import asyncpg
from pgvector.asyncpg import register_vector

from tests.store.test_pg_hybrid import old_table
from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.store.postgres import plan, slots, sql

DIM = 16  # old_table's width
SLOT, SLOT_DIM = "embedding_7", 8  # a reindex's slot, narrower than the original


async def _indexes(admin_dsn: str, name: str) -> dict[str, str]:
    conn = await asyncpg.connect(admin_dsn)
    try:
        rows = await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = ANY($1::text[])"
            " AND indexdef LIKE '%USING hnsw%'",
            [name, f"{name}_turns"],
        )
    finally:
        await conn.close()
    return {r["indexname"]: r["indexdef"] for r in rows}


async def test_migration_19_moves_every_slot_index_to_halfvec_and_recall_reads_it(
    pg_dsn: str, postgres: Postgres, tenant: str
) -> None:
    name = f"ann_{uuid.uuid4().hex[:10]}"
    table = await old_table(postgres.admin_dsn, name, tenant, upto=18, turn=True)
    conn = await asyncpg.connect(postgres.admin_dsn)
    try:  # a reindex's slot, as version 18's reindex left it: vector_cosine_ops
        for on, index in ((table, f"{name}_v7"), (f"{table}_turns", f"{name}_turns_v7")):
            await conn.execute(f"ALTER TABLE {on} ADD COLUMN {SLOT} vector({SLOT_DIM})")
            await conn.execute(
                f"CREATE INDEX {index} ON {on} USING hnsw ({SLOT} vector_cosine_ops)"
            )
    finally:
        await conn.close()
    before = await _indexes(postgres.admin_dsn, name)
    assert len(before) == 4 and all("vector_cosine_ops" in d for d in before.values()), before

    store = app_store(pg_dsn, table=name, embedder=HashingEmbedder(DIM))
    try:
        await store.put((tenant,), "new", "swims on sundays")  # migrates first
        after = await _indexes(postgres.admin_dsn, name)
        assert set(after) == set(before)  # the same names: slot_index still finds them
        for index, definition in after.items():
            slot, dim = (SLOT, SLOT_DIM) if index.endswith("_v7") else ("embedding", DIM)
            assert f"USING hnsw ((({slot})::halfvec({dim})) halfvec_cosine_ops)" in definition

        # The rows written at version 18 are still found, completely.
        found = await store.search((tenant,), "running every morning", limit=5)
        assert [i.key for i in found][:1] == ["old"] and len(found) == 2
        turns = await store.search_turns((tenant,), "an old turn", top_k=5)
        assert [t.text for t in turns] == ["an old turn"]

        # The index statements, as the application role under forced row-level
        # security, order by the migrated index (no sort, no scan of the table).
        q = HashingEmbedder(DIM).embed(["runs"])[0]
        base = (tenant, tenant, 10, q, "runs", "english", 0.5, 0.5, 1.2, 0.4)
        for stmt, args, index in (
            ("SEARCH_INDEXED", (*base, False, *plan.index_args(10)), f"{name}_hnsw"),
            (
                "SEARCH_TURNS_INDEXED",
                (*base, None, None, None, *plan.index_args(10)),
                f"{name}_turns_hnsw",
            ),
        ):
            statement = slots.read_sql(
                sql.nearest(store.statement(stmt), plan.INDEX), "embedding", DIM
            )
            shown = await _explain(pg_dsn, statement, args)
            assert f"Index Scan using {index}" in shown, shown
    finally:
        await store.close()


async def _explain(app_dsn: str, statement: str, args: tuple[object, ...]) -> str:
    conn = await asyncpg.connect(app_dsn)
    try:
        await register_vector(conn)
        async with conn.transaction():
            await conn.execute("SELECT set_config('tulip.tenant', $1, true)", args[0])
            await conn.execute(sql.PLAN_SETTINGS, "40", str(plan.MAX_SCAN_TUPLES))
            # A table of two rows: only the ordering can make the planner take the
            # index, and only when the statement's expression is the index's.
            await conn.execute("SET LOCAL enable_seqscan = off")
            await conn.execute("SET LOCAL enable_sort = off")
            rows = await conn.fetch("EXPLAIN " + statement, *args)
        return "\n".join(r[0] for r in rows)
    finally:
        await conn.close()

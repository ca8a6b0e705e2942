"""Every table of the project that can hold a tenant's name or data is under forced
row-level security; the few that stay global hold ids, names of this code's own and
statuses only (issue 13, part 2). Read from the catalog of a migrated deployment, so a
table or column added later without either fails here."""

from __future__ import annotations

import uuid

import asyncpg

from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.ledger import TABLE as LEDGER
from tulip_service.keys import TABLE as KEYS
from tulip_workers.deadletters import TABLE as LETTERS

#: The global tables (by suffix of their family's table) and every column each may
#: have: a slot registry row names a column, a model and where it is served; a
#: migrations row a version of this code.
GLOBAL = {
    "_slots": {"slot", "model", "dim", "spec", "api_base", "created_at"},
    "_migrations": {"version", "name", "applied_at"},
}

CATALOG = """
SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
       array_agg(a.attname::text ORDER BY a.attnum) AS columns
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
  AND (c.relname LIKE $1 || '%' OR c.relname LIKE $2 || '%' OR c.relname LIKE $3 || '%'
       OR c.relname LIKE $4 || '%')
GROUP BY c.relname, c.relrowsecurity, c.relforcerowsecurity"""


async def test_every_table_is_its_tenants_or_holds_no_tenant(postgres: Postgres) -> None:
    name = f"tt_{uuid.uuid4().hex[:10]}"
    store = app_store(postgres.app_dsn, table=name, embedder=HashingEmbedder(16))
    await store.put(("acme", "facts"), "k", "migrated")
    await store.close()
    families = [t.rpartition(".")[2] for t in (f"public.{name}", LEDGER, LETTERS, KEYS)]
    conn = await asyncpg.connect(postgres.admin_dsn)
    try:
        rows = await conn.fetch(CATALOG, *families)
    finally:
        await conn.close()
    seen: dict[str, list[str]] = {"scoped": [], "global": []}
    for row in rows:
        table = str(row["relname"])
        suffix = next((s for s in GLOBAL for f in families if table == f + s), None)
        if suffix is None:
            assert row["relrowsecurity"] and row["relforcerowsecurity"], table
            seen["scoped"].append(table.removeprefix(name))
        else:
            assert set(row["columns"]) <= GLOBAL[suffix], (table, row["columns"])
            seen["global"].append(table)
    # What the migrations make today: the memories, their turns, counters and postings, the
    # reindex's layouts, jobs and ranges, the namespaces' own graphs, the ledger and the
    # dead letters.
    scoped = {"", "_turns", "_ns_stats", "_turns_ns_stats", "_post", "_turns_post", "_layout"}
    scoped |= {"_df", "_turns_df", "_graphs"}
    scoped |= {"_reindex_jobs"}
    scoped |= {"_reindex_ranges", "tulip_event_ledger", "tulip_dead_letters"}
    scoped |= {"tulip_api_keys"}  # the HTTP service's keys, each of a tenant
    assert sorted(seen["scoped"]) == sorted(scoped)
    assert len(seen["global"]) == 5  # the slot registry and four migrations tables

"""PgMemory beyond the shared contract: isolation at the database, migrations, pool,
encoding cache, construction checks."""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.embeddings import HRREncoder
from tulip_memory.errors import TenantIsolationError
from tulip_memory.store import PgMemory
from tulip_memory.store.postgres import store as pg_store_module
from tulip_memory.store.postgres.admin import dsn_for_role
from tulip_memory.store.postgres.migrations import MIGRATIONS


def fresh_table() -> str:
    return f"mem_{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def pg(pg_dsn: str) -> AsyncIterator[PgMemory]:
    s = app_store(pg_dsn)
    yield s
    await s.close()


async def test_raw_sql_through_the_app_role_sees_only_the_pinned_tenant(
    pg: PgMemory, pg_dsn: str, tenant: str
) -> None:
    await pg.put((tenant, "user"), "secret", "tenant A's secret")
    conn = await asyncpg.connect(pg_dsn)
    try:
        # No tenant pinned: nothing is visible, not even a count.
        assert await conn.fetchval(f"SELECT count(*) FROM {pg.table}") == 0
        async with conn.transaction():
            await conn.execute("SELECT set_config('tulip.tenant', 'someone-else', true)")
            assert await conn.fetchval(f"SELECT count(*) FROM {pg.table}") == 0
            # A write for another tenant is refused by the policy.
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
                await conn.execute(
                    f"INSERT INTO {pg.table} (tenant, ns, key, value) "
                    "VALUES ($1, $1, 'k', '1'::jsonb)",
                    tenant,
                )
        async with conn.transaction():
            await conn.execute("SELECT set_config('tulip.tenant', $1, true)", tenant)
            assert await conn.fetchval(f"SELECT count(*) FROM {pg.table}") == 1
            # Nor can the pinned tenant's rows be moved to another tenant.
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(f"UPDATE {pg.table} SET tenant = 'thief'")
        flags = await conn.fetchrow(
            "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        )
        assert flags is not None and not flags["rolsuper"] and not flags["rolbypassrls"]
        forced = await conn.fetchval(
            "SELECT relforcerowsecurity FROM pg_class WHERE oid = $1::regclass", pg.table
        )
        assert forced is True
    finally:
        await conn.close()


async def test_store_refuses_a_role_that_bypasses_rls(postgres: Postgres, tenant: str) -> None:
    role = f"bypass_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(postgres.admin_dsn)
    try:
        await conn.execute(f"CREATE ROLE {role} LOGIN BYPASSRLS")
    finally:
        await conn.close()
    bypass = PgMemory(dsn_for_role(postgres.admin_dsn, role), table=fresh_table())
    with pytest.raises(TenantIsolationError, match="bypasses row-level security"):
        await bypass.get((tenant,), "k")
    await bypass.close()
    allowed = app_store(postgres.admin_dsn, table=fresh_table(), allow_rls_bypass=True)
    try:
        await allowed.put((tenant,), "k", 1)
        assert await allowed.get((tenant,), "k") == 1
    finally:
        await allowed.close()


async def test_migrations_apply_once_in_order_under_concurrent_first_use(
    pg_dsn: str, tenant: str
) -> None:
    table = fresh_table()
    stores = [app_store(pg_dsn, table=table) for _ in range(4)]
    try:
        await asyncio.gather(*(s.put((tenant,), f"k{i}", i) for i, s in enumerate(stores)))
        conn = await asyncpg.connect(pg_dsn)
        try:
            rows = await conn.fetch(f"SELECT version, name FROM public.{table}_migrations")
            assert sorted(r["version"] for r in rows) == [m.version for m in MIGRATIONS]
            indexes = {
                r["indexname"]
                for r in await conn.fetch(
                    "SELECT indexname FROM pg_indexes WHERE tablename = $1", table
                )
            }
            assert {f"{table}_recent", f"{table}_hnsw", f"{table}_pkey"} <= indexes
            policies = await conn.fetch(
                "SELECT policyname FROM pg_policies WHERE tablename=$1", table
            )
            assert [p["policyname"] for p in policies] == [f"{table}_tenant"]
            width = await conn.fetchval(
                "SELECT atttypmod FROM pg_attribute WHERE attrelid = $1::regclass "
                "AND attname = 'embedding'",
                f"public.{table}",
            )
            assert width == 1024
        finally:
            await conn.close()
        # A later store on the same table applies nothing and sees every row.
        later = app_store(pg_dsn, table=table)
        assert sorted(await later.list_keys((tenant,))) == ["k0", "k1", "k2", "k3"]
        await later.close()
    finally:
        for s in stores:
            await s.close()


async def test_pool_is_built_once_under_concurrent_first_use(pg_dsn: str, tenant: str) -> None:
    store = app_store(pg_dsn, table=fresh_table())
    built: list[Any] = []
    original = store._build_pool

    async def counting() -> Any:
        pool = await original()
        built.append(pool)
        return pool

    store._build_pool = counting  # type: ignore[method-assign]
    try:
        await asyncio.gather(*(store.put((tenant,), f"k{i}", i) for i in range(20)))
        assert len(built) == 1
        assert len(await store.list_keys((tenant,))) == 20
    finally:
        await store.close()


async def test_encoding_cache_is_per_tenant(pg: PgMemory) -> None:
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    await pg.put((a,), "k", "shared words here")
    await pg.put((b,), "k", "shared words here")
    cache = pg.encoding_cache
    await pg.search((a,), "shared words")
    hits_before = cache.hits
    await pg.search((b,), "shared words")
    assert cache.hits == hits_before  # b computed its own entry: no cross-tenant reuse
    await pg.search((b,), "shared words")
    assert cache.hits == hits_before + 1
    model = HRREncoder(512).model
    found_a, _ = cache.get((a, model, "shared words"))
    found_b, _ = cache.get((b, model, "shared words"))
    assert found_a and found_b


def test_cache_size_zero_disables_it(pg_dsn: str) -> None:
    s = app_store(pg_dsn, encoding_cache=0)
    s.encoding_cache.put(("t", "m", "x"), None)
    assert len(s.encoding_cache) == 0


def test_construction_checks(pg_dsn: str) -> None:
    with pytest.raises(ValueError, match="2·1001 = 2002"):
        app_store(pg_dsn, dim=1001)
    with pytest.raises(ValueError, match="dim must be >= 1"):
        app_store(pg_dsn, dim=0)
    with pytest.raises(ValueError, match="encoding_cache"):
        app_store(pg_dsn, encoding_cache=-1)
    for bad in ["x; DROP TABLE y", "Upper", "1abc", "a" * 60, "", "memories\n"]:
        with pytest.raises(ValueError, match="not a valid identifier"):
            app_store(pg_dsn, table=bad)
    with pytest.raises(ValueError, match="not a valid identifier"):
        app_store(pg_dsn, schema="public; --")
    with pytest.warns(RuntimeWarning, match="WITHOUT an ANN index"):
        app_store(pg_dsn, embedder=HRREncoder(1536))


async def test_wide_embedder_table_has_no_ann_index_but_works(pg_dsn: str, tenant: str) -> None:
    table = fresh_table()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        s = app_store(pg_dsn, table=table, embedder=HRREncoder(1100))
    try:
        await s.put((tenant,), "k", "some words")
        assert [i.key for i in await s.search((tenant,), "words")] == ["k"]
        conn = await asyncpg.connect(pg_dsn)
        try:
            names = await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename=$1", table)
            assert f"{table}_hnsw" not in {r["indexname"] for r in names}
        finally:
            await conn.close()
    finally:
        await s.close()


async def test_width_mismatch_with_an_existing_table_is_named(pg_dsn: str, tenant: str) -> None:
    table = fresh_table()
    first = app_store(pg_dsn, table=table, dim=64)
    await first.put((tenant,), "k", "v")
    await first.close()
    second = app_store(pg_dsn, table=table, dim=32)
    with pytest.raises(ValueError, match=r"vector\(128\) but this store encodes 64-wide"):
        await second.get((tenant,), "k")
    await second.close()


async def test_substring_fallback_without_numpy(
    pg_dsn: str, tenant: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(pg_store_module, "_numpy", lambda: None)
    with pytest.warns(RuntimeWarning, match="substring"):
        s = app_store(pg_dsn, table=fresh_table())
    try:
        assert not s.capabilities.semantic_search
        await s.put((tenant,), "a", "Likes GREEN tea")
        await s.put((tenant,), "b", "likes coffee")
        assert await s.get_embedding((tenant,), "a") is None
        found = await s.search((tenant,), "green")
        assert [i.key for i in found] == ["a"]
        assert "substring" in caplog.text
    finally:
        await s.close()


async def test_list_namespaces_needs_the_tenant(pg: PgMemory) -> None:
    with pytest.raises(ValueError, match="prefix starting with the tenant"):
        await pg.list_namespaces()


async def test_batches_and_searches_refuse_to_span_tenants(pg: PgMemory, tenant: str) -> None:
    with pytest.raises(ValueError, match="spans tenants"):
        await pg.put_batch([((tenant,), "k", 1, None), (("other",), "k", 1, None)])
    with pytest.raises(ValueError, match="spans tenants"):
        await pg.get_batch([((tenant,), "k"), (("other",), "k")])
    assert await pg.get((tenant,), "k") is None

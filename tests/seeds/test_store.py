"""``tulip.memory.store``: the seed's calls on the three stores.

Covers the seed's substring ``InMemoryStore.search``, embedders that have only
``dimension`` and ``embed`` (the seed's ``BaseEmbedding``), and the refusal of a role
that bypasses row-level security naming the one command that provisions the role.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import subprocess
import sys
import uuid

import asyncpg
import pytest

from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.errors import TenantIsolationError
from tulip_memory.manager import LLMMemoryManager, Memory, MemoryType
from tulip_memory.store import InMemoryStore, PgMemory
from tulip_memory.store.postgres.admin import dsn_for_role


class DuckEmbedder:
    """The seed's embedder contract only: ``dimension`` and async ``embed(text)``."""

    dimension = 16

    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, text: str) -> list[float]:
        self.calls += 1
        words = text.lower().split()
        vec = [0.0] * self.dimension
        for w in words:
            vec[hashlib.blake2b(w.encode(), digest_size=1).digest()[0] % self.dimension] += 1.0
        return vec if any(vec) else [1.0] + [0.0] * (self.dimension - 1)


async def test_in_memory_search_is_a_substring_match(tenant: str) -> None:
    store = InMemoryStore()
    ns = (tenant, "users", "u1", "memories")
    await store.put(ns, "theme", {"theme": "Dark mode", "reason": "easier on eyes"})
    await store.put(ns, "city", "lives in Lisbon")
    await store.put(ns, "drink", "drinks dark roast coffee")
    found = await store.search(ns, "dark")
    assert sorted(i.key for i in found) == ["drink", "theme"]
    assert [i.key for i in await store.search(ns, "LISBON")] == ["city"]
    assert await store.search(ns, "paris") == []
    assert [i.key for i in await store.search(ns)] == ["drink", "city", "theme"]
    assert len(await store.search(ns, "dark", limit=1)) == 1


async def test_ranked_mode_keeps_the_projects_complete_ranking(tenant: str) -> None:
    store = InMemoryStore(search_mode="ranked")
    ns = (tenant, "m")
    await store.put(ns, "city", "lives in Lisbon")
    await store.put(ns, "drink", "drinks dark roast coffee")
    found = await store.search(ns, "which city, Lisbon?")
    assert [i.key for i in found] == ["city", "drink"]
    with pytest.raises(ValueError, match="search_mode"):
        InMemoryStore(search_mode="fuzzy")  # type: ignore[arg-type]


async def test_manager_retrieve_on_the_in_memory_store_puts_matches_first(tenant: str) -> None:
    manager = LLMMemoryManager(InMemoryStore(), namespace_prefix=(tenant, "u1"))
    await manager.save([Memory(type=MemoryType.USER, key="theme", content="Prefers dark mode.")])
    for i in range(3):
        await manager.save([Memory(type=MemoryType.USER, key=f"o{i}", content=f"other fact {i}")])
    got = await manager.retrieve(query="dark")
    assert got[0].key == "theme"


async def test_in_memory_store_accepts_an_embedder_without_model(tenant: str) -> None:
    embedder = DuckEmbedder()
    store = InMemoryStore(embedder=embedder)
    assert store.capabilities.embedding_dimension == 16
    ns = (tenant, "m")
    await store.put(ns, "a", "tea in the morning")
    await store.put(ns, "b", "chess on weekends")
    hits = await store.search_by_embedding(ns, await embedder.embed("chess weekends"), limit=1)
    assert hits[0].item.key == "b" and embedder.calls >= 3


async def test_a_batch_embedder_is_called_once_per_batch(tenant: str) -> None:
    class Batch:
        """The turn store's EmbeddingBackend shape: batch ``embed`` and ``aembed``."""

        dimension = 3
        model = "batch-model"

        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def embed(self, texts: list[str]) -> list[list[float]]:
            raise AssertionError("the async batch method is the one to use")

        async def aembed(self, texts: list[str]) -> list[list[float]]:
            self.calls.append(list(texts))
            return [[1.0, float(len(t)), 0.5] for t in texts]

    embedder = Batch()
    store = InMemoryStore(embedder=embedder)
    await store.put_batch([((tenant,), "a", "x", None), ((tenant,), "b", "yy", None)])
    assert embedder.calls == [["x", "yy"]]
    assert await store.get_embedding((tenant,), "b") == [1.0, 2.0, 0.5]


def test_an_embedder_without_dimension_or_embed_is_refused_at_construction() -> None:
    class NoEmbed:
        dimension = 8

    class NoDimension:
        async def embed(self, text: str) -> list[float]:
            return [0.0]

    with pytest.raises(TypeError, match="embed"):
        InMemoryStore(embedder=NoEmbed())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dimension"):
        InMemoryStore(embedder=NoDimension())  # type: ignore[arg-type]


async def test_pg_memory_accepts_an_embedder_without_model(pg_dsn: str, tenant: str) -> None:
    table = f"seed_{uuid.uuid4().hex[:10]}"
    store = app_store(pg_dsn, table=table, embedder=DuckEmbedder())
    try:
        ns = (tenant, "user", "u1")
        await store.put(ns, "a", "tea in the morning")
        await store.put(ns, "b", "chess on weekends")
        found = await store.search(ns, "chess weekends", limit=2)
        assert found[0].key == "b"
    finally:
        await store.close()
    # A second process (a new store object) finds the same vector slot: a stable label.
    again = app_store(pg_dsn, table=table, embedder=DuckEmbedder())
    try:
        assert (await again.search((tenant, "user", "u1"), "chess weekends", limit=1))[0].key == "b"
    finally:
        await again.close()


async def test_a_superuser_dsn_provisions_and_then_serves_as_the_application_role(
    postgres: Postgres, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The seed: PgMemory "creates the schema, RLS policy and HNSW index on first use,
    so it works against a bare Postgres locally". Given a superuser's DSN it provisions
    the roles, migrates its table and connects as tulip_app, with a warning."""
    table = f"seed_{uuid.uuid4().hex[:10]}"
    store = PgMemory(postgres.admin_dsn, table=table)
    try:
        with caplog.at_level(logging.WARNING, logger="tulip_memory"):
            await store.put((tenant, "u"), "k", "v")
        assert await store.get((tenant, "u"), "k") == "v"
        async with store.connection() as conn:
            assert await conn.fetchval("SELECT current_user") == "tulip_app"
            # Row-level security binds: nothing is visible without a pinned tenant.
            assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0
    finally:
        await store.close()
    warned = [r.getMessage() for r in caplog.records if "is a superuser" in r.getMessage()]
    assert len(warned) == 1 and "development convenience" in warned[0]
    assert "tulip-memory provision" in warned[0] and "postgresql://***@" in warned[0]
    again = PgMemory(postgres.admin_dsn, table=table)  # a second process: same role
    try:
        assert await again.get((tenant, "u"), "k") == "v"
    finally:
        await again.close()


async def test_a_bypassrls_role_is_refused_naming_one_command_that_provisions_the_role(
    postgres: Postgres, tenant: str
) -> None:
    role = f"bypass_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(postgres.admin_dsn)
    try:
        await conn.execute(f"CREATE ROLE {role} LOGIN BYPASSRLS")
    finally:
        await conn.close()
    store = PgMemory(dsn_for_role(postgres.admin_dsn, role), table=f"seed_{tenant[2:]}")
    with pytest.raises(TenantIsolationError) as refused:
        await store.get((tenant,), "k")
    await store.close()
    message = str(refused.value)
    command = "tulip-memory provision --role tulip_app"
    assert f"TULIP_DATABASE_ADMIN_URL='<this DSN>' {command}" in message
    # The command, run as the message says with an administrator DSN, gives a role
    # the store accepts.
    env = {**os.environ, "TULIP_DATABASE_ADMIN_URL": postgres.admin_dsn}
    env.pop("TULIP_APP_PASSWORD", None)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "tulip_ops.cli", *command.split()[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    app = app_store(dsn_for_role(postgres.admin_dsn, "tulip_app"), table=f"seed_{tenant[2:]}")
    try:
        await app.put((tenant,), "k", "v")
        assert await app.get((tenant,), "k") == "v"
    finally:
        await app.close()

"""The application role owns nothing and can change nothing of the schema; admin
tools run as a non-superuser and refuse tables carrying what the migrations did not
create; existing deployments migrate in place (issue 13, part 1)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence

import asyncpg
import pytest

from tests.support.pg import app_store
from tests.support.services import APP_ROLE, Postgres
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.errors import SchemaError
from tulip_memory.manager import Memory
from tulip_memory.messages import Message, Role
from tulip_memory.reindex import Reindexer, ReindexError
from tulip_memory.store import PgMemory
from tulip_memory.store.postgres import admin
from tulip_memory.store.postgres.admin import OWNER, ProvisionError
from tulip_memory.store.postgres.family import apply_migrations
from tulip_memory.store.postgres.migrations import MEMORIES, names
from tulip_ops.provision import provision
from tulip_wire.events import encode, session_ended
from tulip_workers import dlq
from tulip_workers.extraction import DEAD, ExtractionWorker
from tulip_workers.retry import RetryPolicy

LEDGER, LETTERS = "public.tulip_event_ledger", "public.tulip_dead_letters"
EVIL = """CREATE FUNCTION {schema}.tulip_evil() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN EXECUTE 'ALTER ROLE {role} SUPERUSER'; RETURN NEW; END $$"""


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PgMemory]:
    s = app_store(pg_dsn, table=f"roles_{uuid.uuid4().hex[:8]}", embedder=HashingEmbedder(64))
    await s.put(("warm",), "k", "the table exists")
    yield s
    await s.close()


async def refused(dsn: str, stmt: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(stmt)
    finally:
        await conn.close()


async def is_superuser(admin_dsn: str, role: str) -> bool:
    conn = await asyncpg.connect(admin_dsn)
    try:
        return bool(await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = $1", role))
    finally:
        await conn.close()


async def test_the_app_role_cannot_change_the_schema(store: PgMemory, pg_dsn: str) -> None:
    t = store.table
    tables = [t, f"{t}_turns", f"{t}_slots", f"{t}_layout", f"{t}_reindex_jobs"]
    tables += [f"{t}_reindex_ranges", f"{t}_migrations", LEDGER, LETTERS]
    for table in tables:
        for stmt in (
            f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY",
            f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY",
            f"DROP TABLE {table}",
            f"CREATE TRIGGER evil BEFORE UPDATE ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()",
            f"CREATE RULE evil AS ON UPDATE TO {table} DO ALSO NOTHING",
            f"CREATE POLICY evil ON {table} USING (true)",
            f"ALTER TABLE {table} OWNER TO {APP_ROLE}",
        ):
            await refused(pg_dsn, stmt)
    await refused(pg_dsn, f"CREATE TABLE public.{store.table_name}_mine (x int)")
    await refused(pg_dsn, "CREATE FUNCTION public.mine() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    # The registries are read-only: a slot pointing recall at another API base, or a
    # layout pointing it at another column, cannot be written.
    await refused(pg_dsn, f"UPDATE {t}_slots SET api_base = 'http://attacker.example/'")
    await refused(pg_dsn, f"INSERT INTO {t}_slots (slot, model, dim) VALUES ('x', 'm', 3)")
    await refused(pg_dsn, f"DELETE FROM {t}_slots")
    await refused(pg_dsn, f"UPDATE {t}_layout SET read_slot = 'x'")
    await refused(pg_dsn, f"INSERT INTO {t}_layout VALUES ('t', 'x', ARRAY['x'])")
    await refused(
        pg_dsn,
        f"INSERT INTO {t}_reindex_jobs (scope, slot, model, spec, dim, "
        "batch, status) VALUES ('', 's', 'm', 'm', 3, 1, 'running')",
    )
    conn = await asyncpg.connect(pg_dsn)
    try:
        owned = await conn.fetch(
            "SELECT oid::regclass::text FROM pg_class WHERE relowner = "
            "(SELECT oid FROM pg_roles WHERE rolname = current_user)"
        )
        assert owned == []
        owner = await conn.fetchval(
            f"SELECT relowner::regrole::text FROM pg_class WHERE oid = '{t}'::regclass"
        )
        assert owner == OWNER
    finally:
        await conn.close()


async def test_the_app_role_verifies_the_schema_and_never_migrates(pg_dsn: str) -> None:
    fresh = PgMemory(pg_dsn, table=f"roles_{uuid.uuid4().hex[:8]}")
    with pytest.raises(SchemaError, match=r"does not exist yet.*tulip-memory provision"):
        await fresh.get(("t",), "k")
    await fresh.close()


async def model_down(messages: Sequence[Message], existing: Sequence[Memory]) -> list[Memory]:
    raise ValueError("the model answered something that is not a list of memories")


async def dead_letter(store: PgMemory, tenant: str) -> str:
    env = session_ended((tenant, "u"), "t", [Message(role=Role.USER, content="hi")], ts=time.time())
    worker = ExtractionWorker(
        store=store, extractor=model_down, retry=RetryPolicy(attempts=1, base=0.01, cap=0.02)
    )
    assert await worker.handle(encode(env.with_seq(3))) == DEAD
    return env.id


def cli(admin_dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tulip_ops.cli", "dlq", *args],
        env={**os.environ, "TULIP_DATABASE_ADMIN_URL": admin_dsn},  # never on argv
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_the_trigger_then_replay_escalation_fails(
    store: PgMemory, postgres: Postgres, pg_dsn: str, tenant: str
) -> None:
    event_id = await dead_letter(store, tenant)
    # The attack of issue 13, as the app role: a trigger firing in the operator's replay.
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(EVIL.format(schema="pg_temp", role=APP_ROLE))
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(
                f"CREATE TRIGGER evil BEFORE UPDATE ON {LEDGER} "
                "FOR EACH ROW EXECUTE FUNCTION pg_temp.tulip_evil()"
            )
    finally:
        await conn.close()
    # The same trigger planted anyway (left over from a deployment where the app role
    # owned the ledger): the tools refuse, and say why in one line.
    op = await asyncpg.connect(postgres.admin_dsn)
    try:
        await op.execute(EVIL.format(schema="public", role=APP_ROLE))
        await op.execute(
            f"CREATE TRIGGER evil BEFORE UPDATE ON {LEDGER} "
            "FOR EACH ROW EXECUTE FUNCTION public.tulip_evil()"
        )
        listed = cli(postgres.admin_dsn, "list")
        assert listed.returncode == 1
        assert listed.stderr.strip().count("\n") == 0
        assert f"table {LEDGER} carries trigger 'evil'" in listed.stderr
        with pytest.raises(PermissionError, match="carries trigger 'evil'"):
            await dlq.as_operator(op)
        # Even past the audit, the replay runs as tulip_ops (never a superuser), so
        # the trigger's ALTER ROLE is refused and the replay rolls back.
        await admin.as_operator(op)
        assert await op.fetchval("SELECT current_user") == "tulip_ops"
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await dlq.replay(op, event_id, lambda body: None)
    finally:
        await op.execute("RESET ROLE")
        await op.execute(f"DROP TRIGGER IF EXISTS evil ON {LEDGER}")
        await op.execute("DROP FUNCTION IF EXISTS public.tulip_evil()")
        await op.close()
    assert not await is_superuser(postgres.admin_dsn, APP_ROLE)
    # Without the trigger the replay goes through, as tulip_ops.
    op = await asyncpg.connect(postgres.admin_dsn)
    try:
        await dlq.as_operator(op)
        sent: list[str] = []
        await dlq.replay(op, event_id, sent.append)
        assert len(sent) == 1
    finally:
        await op.close()


async def test_all_tenant_reindex_refuses_an_unexpected_trigger(
    store: PgMemory, postgres: Postgres
) -> None:
    op = await asyncpg.connect(postgres.admin_dsn)
    try:
        await op.execute(
            f"CREATE TRIGGER sneaky BEFORE UPDATE ON {store.table}_layout "
            "FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()"
        )
        with pytest.raises(ReindexError, match=f"{store.table}_layout carries trigger 'sneaky'"):
            await Reindexer(store, admin_dsn=postgres.admin_dsn).start("hashing:16")
    finally:
        await op.execute(f"DROP TRIGGER IF EXISTS sneaky ON {store.table}_layout")
        await op.close()


async def test_an_existing_deployment_migrates_in_place(
    postgres: Postgres, pg_dsn: str, tenant: str
) -> None:
    """A table the app role created on first use (the old way) moves to the owner."""
    name = f"old_{uuid.uuid4().hex[:8]}"
    table = f"public.{name}"
    op = await asyncpg.connect(postgres.admin_dsn)
    try:
        await op.execute(f"GRANT CREATE ON SCHEMA public TO {APP_ROLE}")
        await op.execute(f"SET ROLE {APP_ROLE}")
        placeholders = {"t": table, **names(name=name, dim=128, tsconfig="english")}
        await apply_migrations(op, table, MEMORIES.steps(placeholders, upto=9))
        await op.execute(
            f"INSERT INTO {table}_slots (slot, model, dim) VALUES ('embedding', 'hrr-64', 128)"
        )
        await op.execute("RESET ROLE")
        await op.execute(f"REVOKE CREATE ON SCHEMA public FROM {APP_ROLE}")
        owner = await op.fetchval(
            f"SELECT relowner::regrole::text FROM pg_class WHERE oid = '{table}'::regclass"
        )
        assert owner == APP_ROLE
    finally:
        await op.close()
    behind = PgMemory(pg_dsn, table=name, dim=64)
    with pytest.raises(SchemaError, match=r"lacks migrations \[10"):
        await behind.get((tenant,), "k")
    await behind.close()
    upgraded = PgMemory(pg_dsn, table=name, dim=64, migrator=postgres.admin_dsn)
    await provision(postgres.admin_dsn, APP_ROLE, stores=[upgraded])
    try:
        await upgraded.put((tenant,), "k", "kept")
        assert await upgraded.get((tenant,), "k") == "kept"
    finally:
        await upgraded.close()
    await refused(pg_dsn, f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    await refused(pg_dsn, f"ALTER TABLE {table}_turns DISABLE ROW LEVEL SECURITY")


async def test_provisioning_refuses_what_the_app_role_still_owns(postgres: Postgres) -> None:
    op = await asyncpg.connect(postgres.admin_dsn)
    try:
        await op.execute("CREATE FUNCTION public.planted() RETURNS int LANGUAGE sql AS 'SELECT 1'")
        await op.execute(f"ALTER FUNCTION public.planted() OWNER TO {APP_ROLE}")
        with pytest.raises(ProvisionError, match=r"still owns function planted\(\)"):
            await provision(postgres.admin_dsn, APP_ROLE)
    finally:
        await op.execute("DROP FUNCTION IF EXISTS public.planted()")
        await op.close()


@pytest.mark.parametrize("role, schema", [("tulip_app\n", "public"), ("tulip_app", "public\n")])
async def test_provisioning_refuses_a_name_that_is_not_an_identifier(
    postgres: Postgres, role: str, schema: str
) -> None:
    with pytest.raises(ValueError, match="not a valid lower-case identifier"):
        await admin.provision_app_role(postgres.admin_dsn, role, schema=schema)

"""Retention policies: what is past a tenant's policy goes, what is not (or another
tenant's, or a kind left off) stays; ``tulip-memory retention`` sets and runs them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.support.pg import app_store
from tests.support.services import Postgres
from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.delta.tenants import tenant_checkpointer
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.messages import Message, Role
from tulip_memory.registry import get_checkpointer
from tulip_memory.state import AgentState
from tulip_memory.store import PgMemory
from tulip_ops.cli import main
from tulip_ops.dev.embedded import run_async
from tulip_ops.provision import migrate_now
from tulip_workers.deadletters import TABLE as LETTERS


@pytest.fixture
def table(postgres: Postgres) -> Iterator[str]:
    name = f"ret_{uuid.uuid4().hex[:8]}"
    migrate_now(app_store(postgres.app_dsn, table=name, embedder=HashingEmbedder(384)))
    yield name


async def _plant(postgres: Postgres, table: str, tenants: list[str]) -> None:
    """Per tenant: two memories and two turns (one of each 40 days old) and two dead
    letters (one 40 days old)."""
    store = PgMemory(postgres.app_dsn, table=table, embedder=HashingEmbedder(384))
    try:
        for t in tenants:
            for key in ("old", "new"):
                await store.put((t, "u", "user"), key, {"content": f"{key} fact"})
    finally:
        await store.close()
    conn = await asyncpg.connect(postgres.admin_dsn)
    try:
        for t in tenants:
            for n, age in enumerate((40, 1)):
                await conn.execute(
                    f"""INSERT INTO public.{table}_turns (tenant, ns, thread_id, event_id,
                        position, text, turn, created_at)
                    VALUES ($1, $1 || chr(31) || 'u', 'th', $2, 0, 'a turn', '{{}}',
                            now() - make_interval(days => $3))""",
                    t, f"e{n}", age,
                )  # fmt: skip
                await conn.execute(
                    f"""INSERT INTO {LETTERS} (event_id, tenant, reason, raw, sha256, size,
                        attempts, failed_at)
                    VALUES ($1, $2, 'r', 'x', 'd', 1, 1, now() - make_interval(days => $3))""",
                    f"l{n}", t, age,
                )  # fmt: skip
            await conn.execute(
                f"UPDATE public.{table} SET updated_at = now() - interval '40 days', "
                "metadata = '{}' WHERE tenant = $1 AND key = 'old'",
                t,
            )
    finally:
        await conn.close()


async def _left(postgres: Postgres, table: str, tenant: str) -> dict[str, int]:
    conn = await asyncpg.connect(postgres.admin_dsn)
    try:
        return {
            what: int(await conn.fetchval(f"SELECT count(*) FROM {t} WHERE tenant = $1", tenant))
            for what, t in (
                ("memories", f"public.{table}"),
                ("turns", f"public.{table}_turns"),
                ("dead_letters", LETTERS),
            )
        }
    finally:
        await conn.close()


def test_retention_removes_what_is_past_each_tenants_policy(
    postgres: Postgres,
    table: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kept, strict = f"k{uuid.uuid4().hex[:6]}", f"s{uuid.uuid4().hex[:6]}"
    run_async(_plant(postgres, table, [kept, strict]))
    url = f"file://{tmp_path / 'checkpoints'}"
    base = get_checkpointer(url)
    assert isinstance(base, DeltaCheckpointer)
    state = AgentState(messages=(Message(role=Role.USER, content="hi"),))
    run_async(tenant_checkpointer(base, strict).save(state, "t-1"))
    for name, value in {
        "TULIP_DATABASE_ADMIN_URL": postgres.admin_dsn,
        "TULIP_DATABASE_URL": postgres.app_dsn,
        "TULIP_MEMORY_TABLE": table,
        "TULIP_CHECKPOINT_URL": url,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TULIP_REDIS_URL", raising=False)
    monkeypatch.delenv("TULIP_BROKER_URL", raising=False)
    # strict: turns and memories 30 days, dead letters 30, threads 1 (its thread is new).
    assert main(["retention", "set", "--tenant", strict, "--turns-days", "30",
                 "--memories-days", "30", "--dead-letters-days", "30",
                 "--threads-days", "1"]) == 0  # fmt: skip
    assert main(["retention", "set", "--tenant", kept, "--turns-days", "60"]) == 0
    assert main(["retention", "show"]) == 0
    shown = capsys.readouterr().out
    assert f"{kept}: turns 60 days" in shown, shown
    assert main(["retention", "run", "--batch", "1", "--pace", "0"]) == 0
    out = capsys.readouterr().out
    assert f"{strict}: turns 1 removed" in out and "retention run done" in out, out
    assert run_async(_left(postgres, table, strict)) == {
        "memories": 1, "turns": 1, "dead_letters": 1,
    }  # fmt: skip
    assert run_async(_left(postgres, table, kept)) == {"memories": 2, "turns": 2, "dead_letters": 2}
    assert run_async(tenant_checkpointer(base, strict).list_threads()) == ["t-1"]
    assert main(["retention", "set", "--tenant", "bad", "--turns-days", "0"]) == 2

"""Each table family, migrated into an empty database, leaves exactly the catalog of
its checked-in snapshot (``tests/store/catalog/<family>.json``): tables, columns and
types, indexes, constraints, row-level security and policies, triggers, functions,
owners and grants. Any schema drift fails here; a deliberate change (a new migration)
regenerates the snapshot with ``--update-catalog`` and commits it beside the change."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.support.catalog import catalog, dump, fresh_database, load
from tests.support.services import APP_ROLE, Postgres
from tulip_memory.erasures import TABLE as ERASURES
from tulip_memory.ledger import TABLE as LEDGER
from tulip_memory.retention import TABLE as RETENTION
from tulip_memory.store import PgMemory
from tulip_ops.dev.embedded import run_async
from tulip_ops.provision import provision
from tulip_service.keys import TABLE as KEYS
from tulip_workers.deadletters import TABLE as LETTERS

SNAPSHOTS = Path(__file__).parent / "catalog"
MEMORIES = "public.memories"
#: family -> the table its snapshot reads (the family's relations are its name and <name>_*).
FAMILIES = {
    "memories": MEMORIES,
    "event_ledger": LEDGER,
    "erasures": ERASURES,
    "retention": RETENTION,
    "dead_letters": LETTERS,
    "api_keys": KEYS,
}
REGENERATE = ".venv/bin/python -m pytest tests/store/test_catalog.py --update-catalog"


@pytest.fixture(scope="module")
def catalogs(postgres: Postgres) -> Iterator[dict[str, dict[str, Any]]]:
    """Every family's catalog after `tulip-memory provision` migrated an empty database."""

    async def go() -> dict[str, dict[str, Any]]:
        async with fresh_database(postgres.admin_dsn) as admin:
            store = PgMemory(admin, table=MEMORIES.partition(".")[2], dim=8, migrator=admin)
            try:
                await provision(admin, APP_ROLE, stores=[store])
            finally:
                await store.close()
            conn = await asyncpg.connect(admin)
            try:
                return {f: await catalog(conn, table) for f, table in FAMILIES.items()}
            finally:
                await conn.close()

    yield run_async(go())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_catalog_matches_its_snapshot(
    family: str, catalogs: dict[str, dict[str, Any]], request: pytest.FixtureRequest
) -> None:
    path = SNAPSHOTS / f"{family}.json"
    now = dump(catalogs[family])
    if request.config.getoption("--update-catalog"):
        path.write_text(now)
        return
    before = load(path)
    assert before is not None, f"no snapshot {path}: create it with `{REGENERATE}`"
    was = dump(before)
    diff = "".join(
        difflib.unified_diff(was.splitlines(True), now.splitlines(True), str(path), "migrated")
    )
    assert not diff, (
        f"the {family} schema drifted from {path}:\n{diff}\nIf the change is deliberate "
        f"(a new migration), regenerate the snapshot with `{REGENERATE}`, review its diff "
        "and commit it with the change."
    )


def test_every_family_has_rows_in_its_snapshot(catalogs: dict[str, dict[str, Any]]) -> None:
    """The snapshot reads real objects: each family made tables and recorded versions."""
    for family, data in catalogs.items():
        assert data["relations"], family
        assert data["migrations"], family

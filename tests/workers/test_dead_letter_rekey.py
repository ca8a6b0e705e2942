"""A deployment whose dead letters are keyed by event id alone (migrations 1-3) moves to
the ``(tenant, event_id)`` key in place, through `tulip-memory provision`: its letters
stay, and another tenant's letter of the same id is then stored beside them, each seen
only by its own tenant as the application role (real Postgres, a database of its own)."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest

from tests.support.catalog import database_dsn, fresh_database
from tests.support.services import APP_ROLE, Postgres
from tulip_memory.store.postgres.admin import as_owner, provision_app_role
from tulip_memory.store.postgres.family import apply_migrations
from tulip_memory.store.postgres.sql import PIN_TENANT
from tulip_ops.provision import provision
from tulip_workers.deadletters import LETTERS, TABLE, DeadLetter, DeadLetters

EVENT_ID = "e" * 32
OLD_INSERT = f"""INSERT INTO {TABLE} (event_id, tenant, reason, raw, sha256, size, attempts)
VALUES ($1, $2, 'old', 'a', 'sha', 1, 1)"""


def letter(tenant: str, body: str) -> DeadLetter:
    return DeadLetter.of(
        event_id=EVENT_ID, tenant=tenant, type=None, key=None, seq=None, reason="failed",
        body=body, attempts=1, failed_at=datetime.now(UTC),
    )  # fmt: skip


async def test_dead_letters_keyed_by_event_id_are_rekeyed_in_place(postgres: Postgres) -> None:
    async with fresh_database(postgres.admin_dsn) as dsn:
        await provision_app_role(dsn, APP_ROLE)  # the roles, as an older release made them
        async with as_owner(dsn) as owner:
            steps = LETTERS.steps({**DeadLetters.names, "t": TABLE}, upto=3)
            await apply_migrations(owner, TABLE, steps)
            async with owner.transaction():
                await owner.execute(PIN_TENANT, "a")
                await owner.execute(OLD_INSERT, EVENT_ID, "a")
            with pytest.raises(asyncpg.PostgresError):  # the old key: b's letter of a's id
                async with owner.transaction():
                    await owner.execute(PIN_TENANT, "b")
                    await owner.execute(OLD_INSERT, EVENT_ID, "b")
            database = await owner.fetchval("SELECT current_database()")
        await provision(dsn, APP_ROLE)
        app = await asyncpg.connect(database_dsn(postgres.app_dsn, database))
        try:
            async with app.transaction():
                await app.execute(PIN_TENANT, "b")
                await DeadLetters().put(app, letter("b", "b's body"))
            for tenant, body in (("a", "a"), ("b", "b's body")):
                async with app.transaction():
                    await app.execute(PIN_TENANT, tenant)
                    seen = await DeadLetters().find(app, EVENT_ID)
                    assert [(d.tenant, d.body) for d in seen] == [(tenant, body)]
                    own = await DeadLetters().get(app, EVENT_ID, tenant=tenant)
                    assert own is not None and own.body == body
                    other = "b" if tenant == "a" else "a"
                    assert await DeadLetters().get(app, EVENT_ID, tenant=other) is None
        finally:
            await app.close()

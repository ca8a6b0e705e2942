"""``tulip-memory provision``: roles, ownership and every migration, as the owner.

Run once per deployment and again after each upgrade, with the administrator DSN
(``TULIP_DATABASE_ADMIN_URL``). It creates or brings back in line the roles of
:mod:`tulip_memory.store.postgres.admin`, moves what an older deployment's
application role owns to ``tulip_owner`` (existing deployments migrate in place),
and runs the migrations of the event ledger, the dead letters, the HTTP service's API
keys and the memories table (``TULIP_MEMORY_TABLE``, vectors of ``TULIP_EMBED_*``) as the owner. The
application role never migrates; its stores verify the schema version at first use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tulip_memory.store.postgres import PgMemory, provision_app_role
from tulip_memory.store.postgres.admin import as_owner
from tulip_ops.sync import run_async
from tulip_service.keys import ApiKeys
from tulip_workers.deadletters import DeadLetters


async def provision(
    admin_dsn: str,
    role: str = "tulip_app",
    *,
    password: str | None = None,
    ops_password: str | None = None,
    schema: str = "public",
    stores: Sequence[PgMemory] = (),
) -> str:
    """Provision the roles and migrate the project's tables and ``stores`` (built with
    ``migrator=admin_dsn``); the application role's DSN."""
    app_dsn = await provision_app_role(
        admin_dsn, role, password=password, schema=schema, ops_password=ops_password
    )
    async with as_owner(admin_dsn) as conn:
        await DeadLetters().migrate(conn)
        await ApiKeys().migrate(conn)
    for store in stores:
        await store.migrate()
    return app_dsn


def migrate_now(store: PgMemory) -> None:
    """Migrate ``store``'s table (built with ``migrator=``) from sync code, then close it."""

    async def go() -> None:
        try:
            await store.migrate()
        finally:
            await store.close()

    run_async(go())


def configured_store(admin_dsn: str, environ: Mapping[str, str]) -> PgMemory:
    """The memories table the environment names, migrated through ``admin_dsn``."""
    from tulip_memory.config import store_from_env

    env = {"TULIP_DATABASE_URL": admin_dsn, **environ}
    return store_from_env(env, migrator=admin_dsn)

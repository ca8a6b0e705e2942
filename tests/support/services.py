"""Real servers for the suite, started by the tests themselves.

Each service is started once per session and stopped at the end, leaving no process
behind. Environment variables point the same tests at external services instead:

- ``TULIP_TEST_DATABASE_URL``: an administrator DSN of a Postgres with pgvector;
  the suite provisions its application role there.
- ``TULIP_TEST_REDIS_URL``: a Redis URL (the suite only uses keys it creates).
- ``TULIP_TEST_S3_ENDPOINT_URL``: an S3 API endpoint (credentials from the usual
  AWS variables).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tulip_ops.dev.embedded import EmbeddedPostgres, EmbeddedRedis, run_async
from tulip_ops.provision import provision

APP_ROLE = "tulip_test_app"


@dataclass(frozen=True)
class Postgres:
    admin_dsn: str
    app_dsn: str


#: The session's Postgres, once started (test stores migrate through its admin DSN).
STARTED: list[Postgres] = []


def start_postgres() -> Iterator[Postgres]:
    external = os.environ.get("TULIP_TEST_DATABASE_URL")
    if external:
        STARTED.append(Postgres(external, run_async(provision(external, APP_ROLE))))
        yield STARTED[-1]
        return
    data = Path(tempfile.mkdtemp(prefix="tulip-pg-"))
    server = EmbeddedPostgres(data, keep=False).start(APP_ROLE)
    run_async(_throwaway(server.admin_dsn))
    STARTED.append(Postgres(server.admin_dsn, server.app_dsn))
    try:
        yield STARTED[-1]
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


#: The session server's data is deleted when the session ends: nothing it writes has to
#: survive a crash of the machine, so commits and checkpoints need not wait for the disk
#: (a commit still writes its WAL before it returns: a killed server process loses
#: nothing it reported committed). Tests that restart Postgres run a server of their own.
THROWAWAY = {"fsync": "off", "full_page_writes": "off"}


async def _throwaway(admin_dsn: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        for name, value in THROWAWAY.items():
            await conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


def start_redis() -> Iterator[str]:
    external = os.environ.get("TULIP_TEST_REDIS_URL")
    if external:
        yield external
        return
    data = Path(tempfile.mkdtemp(prefix="tulip-redis-"))
    server = EmbeddedRedis(data).start()
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def start_s3() -> Iterator[str]:
    external = os.environ.get("TULIP_TEST_S3_ENDPOINT_URL")
    if external:
        yield external
        return
    from moto.server import ThreadedMotoServer

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()

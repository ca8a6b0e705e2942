"""The embedded servers the suite and ``tulip-memory dev`` stand on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import boto3
import psutil
import pytest
import redis

from tests.support.services import Postgres
from tulip_ops.dev import server_settings
from tulip_ops.dev.embedded import MIN_PGVECTOR, PG_MAJOR, EmbeddedPostgres, EmbeddedRedis

_SIZED = ("shared_buffers", "effective_cache_size", "work_mem")
_COUNTED = ("max_parallel_maintenance_workers",)


def _running_with(dsn: str) -> dict[str, str]:
    async def show() -> dict[str, str]:
        conn = await asyncpg.connect(dsn)
        try:
            return {n: str(await conn.fetchval(f"SHOW {n}")) for n in (*_SIZED, *_COUNTED)}
        finally:
            await conn.close()

    return asyncio.run(show())


def _in_mb(settings: dict[str, str]) -> dict[str, int]:
    units = {"MB": 1, "GB": 1024}
    return {
        n: int(v) if n in _COUNTED else int(v[:-2]) * units[v[-2:]] for n, v in settings.items()
    }


def test_server_settings_follow_the_machines_memory() -> None:
    gb = 1 << 30
    assert server_settings.sized(8 * gb, cores=2) == {
        "shared_buffers": "2048MB",
        "effective_cache_size": "6144MB",
        "work_mem": "16MB",
        "max_parallel_maintenance_workers": "0",  # an index build leaves a core to queries
    }
    assert server_settings.sized(8 * gb, cores=8)["max_parallel_maintenance_workers"] == "3"
    assert server_settings.sized(gb // 4)["shared_buffers"] == "128MB"  # at least initdb's
    assert server_settings.sized(64 * gb)["shared_buffers"] == "8192MB"


def test_embedded_postgres_keeps_data_across_restarts_and_stops(server_dir: Path) -> None:
    pg = EmbeddedPostgres(server_dir / "pg").start()
    pid = pg._server.get_pid()
    assert pid is not None and psutil.pid_exists(pid)
    wanted = _in_mb(server_settings.sized(server_settings.machine_memory()))
    assert _in_mb(_running_with(pg.admin_dsn)) == wanted  # restarted once for the buffers

    async def write() -> None:  # as the administrator: the app role creates nothing
        conn = await asyncpg.connect(pg.admin_dsn)
        await conn.execute("CREATE TABLE kept (x int); INSERT INTO kept VALUES (7)")
        await conn.close()

    asyncio.run(write())
    pg.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE

    again = EmbeddedPostgres(server_dir / "pg").start()
    try:

        async def read() -> int:
            conn = await asyncpg.connect(again.admin_dsn)
            try:
                return int(await conn.fetchval("SELECT x FROM kept"))
            finally:
                await conn.close()

        assert asyncio.run(read()) == 7
        assert _in_mb(_running_with(again.admin_dsn)) == wanted
    finally:
        again.stop()


def test_postgres_runs_pgvector_with_iterative_index_scans(postgres: Postgres) -> None:
    async def probe() -> tuple[str, str]:
        conn = await asyncpg.connect(postgres.admin_dsn)
        try:
            version = await conn.fetchval(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
            )
            await conn.execute("SELECT '[1]'::vector")  # loads the library and its settings
            return str(version), str(await conn.fetchval("SHOW hnsw.iterative_scan"))
        finally:
            await conn.close()

    version, iterative = asyncio.run(probe())
    assert tuple(int(x) for x in version.split(".")[:2]) >= MIN_PGVECTOR
    assert iterative == "off"  # the setting exists; the store turns it on per statement


def test_embedded_postgres_refuses_a_data_dir_of_another_major(tmp_path: Path) -> None:
    data = tmp_path / "pg"
    data.mkdir()
    (data / "PG_VERSION").write_text(f"{PG_MAJOR - 1}\n")
    with pytest.raises(RuntimeError, match=f"PostgreSQL {PG_MAJOR - 1} cluster") as err:
        EmbeddedPostgres(data).start()
    assert f"mv {data} {data}.pg{PG_MAJOR - 1}" in str(err.value)
    assert "pg_dumpall" in str(err.value)


def test_embedded_redis_keeps_data_across_restarts_and_stops(tmp_path: Path) -> None:
    r = EmbeddedRedis(tmp_path / "redis").start()
    client = redis.Redis.from_url(r.url)
    client.set("k", "v")
    pid = int(client.info()["process_id"])
    client.close()
    r.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    again = EmbeddedRedis(tmp_path / "redis").start()
    try:
        assert redis.Redis.from_url(again.url).get("k") == b"v"
    finally:
        again.stop()


def test_redis_fixture_answers(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    assert client.ping()
    client.close()


def test_s3_fixture_stores_objects(s3_endpoint: str) -> None:
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="tulip-test-services")
    s3.put_object(Bucket="tulip-test-services", Key="a/b", Body=b"hello")
    body = s3.get_object(Bucket="tulip-test-services", Key="a/b")["Body"].read()
    assert body == b"hello"

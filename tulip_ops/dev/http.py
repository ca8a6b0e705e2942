"""``tulip-memory serve`` as a process of the dev stack, on a loopback port, and an
API key of tenant ``demo`` for it (the previous run's is revoked first)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tulip_ops.dev.flower import free_port, stop_child
from tulip_ops.dev.supervisor import die_with_parent

DEMO_TENANT = "demo"
DEMO_KEY_NAME = "tulip-memory dev"


@dataclass
class HttpService:
    env: dict[str, str]
    log: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _out: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> HttpService:
        self.port = self.port or free_port()
        self._out = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(  # noqa: S603 - our own command line, no shell
            [sys.executable, "-m", "tulip_ops.cli", "serve", f"--port={self.port}"],
            env=self.env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the HTTP service exited; see {self.log}")
            try:
                urllib.request.urlopen(f"{self.url}/healthz", timeout=5).close()  # noqa: S310
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the HTTP service did not answer within {timeout}s; see {self.log}")

    def stop(self) -> None:
        stop_child(self.proc, self._out)
        self._out = None


def demo_key(admin_dsn: str) -> str:
    """A fresh key of tenant ``demo`` (scope ``all``); the dev stack's earlier ones revoked."""
    from tulip_ops.dev.embedded import run_async

    async def go() -> str:
        import asyncpg

        from tulip_memory.store.postgres.admin import as_operator
        from tulip_service import keys

        conn = await asyncpg.connect(admin_dsn)
        try:
            await as_operator(conn)
            for old in await keys.listed(conn, DEMO_TENANT):
                if old.name == DEMO_KEY_NAME and old.revoked_at is None:
                    await keys.revoke(conn, old.key_id)
            text, _ = await keys.mint(conn, DEMO_TENANT, "all", DEMO_KEY_NAME)
            return text
        finally:
            await conn.close()

    key: str = run_async(go())
    return key

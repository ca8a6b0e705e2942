"""The HTTP service as a real process on a real port (``tulip-memory serve``), and
API keys minted for it as an operator would."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import asyncpg
import httpx

from tulip_memory.store.postgres.admin import as_operator
from tulip_ops.dev.embedded import run_async
from tulip_ops.dev.flower import free_port
from tulip_service import keys

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ServiceProcess:
    env: dict[str, str]
    log: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _out: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> ServiceProcess:
        self.port = self.port or free_port()
        self._out = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tulip_ops.cli", "serve", f"--port={self.port}"],
            cwd=ROOT,
            env=self.env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the service exited:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the service did not answer in {timeout}s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (a graceful stop), SIGKILL after ``timeout``; the exit status."""
        self.terminate()
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._out is not None:
            self._out.close()
            self._out = None
        return code


def mint_key(admin_dsn: str, tenant: str, scope: str = "all", name: str = "") -> tuple[str, str]:
    """A new API key of ``tenant`` as ``tulip-memory keys create`` makes it: its text
    and its id."""

    async def go() -> tuple[str, str]:
        conn = await asyncpg.connect(admin_dsn)
        try:
            await as_operator(conn)
            text, info = await keys.mint(conn, tenant, scope, name)
            return text, info.key_id
        finally:
            await conn.close()

    result: tuple[str, str] = run_async(go())
    return result

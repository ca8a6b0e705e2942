"""Flower, Celery's monitor, with basic auth (``FLOWER_BASIC_AUTH``, never argv), on loopback."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tulip_ops.dev.supervisor import die_with_parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_child(proc: subprocess.Popen[bytes] | None, out: IO[bytes] | None) -> None:
    """SIGTERM a child of the stack, SIGKILL if it does not exit in 15 s; close its log."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if out is not None:
        out.close()


@dataclass
class Flower:
    env: dict[str, str]
    log: Path
    user: str = "tulip"
    password: str = ""
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _out: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> Flower:
        self.password = self.password or secrets.token_urlsafe(12)
        self.port = self.port or free_port()
        self._out = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(  # noqa: S603 - our own command line, no shell
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tulip_workers.app",
                "flower",
                "--address=127.0.0.1",
                f"--port={self.port}",
            ],
            # Credentials by environment, never argv: /proc/<pid>/cmdline is world-readable.
            env={**self.env, "FLOWER_BASIC_AUTH": f"{self.user}:{self.password}"},
            stdout=self._out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        self._wait(timeout)
        return self

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"flower exited; see {self.log}")
            try:
                urllib.request.urlopen(f"{self.url}/healthcheck", timeout=1).close()  # noqa: S310
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"flower did not answer within {timeout}s; see {self.log}")

    def stop(self) -> None:
        stop_child(self.proc, self._out)
        self._out = None

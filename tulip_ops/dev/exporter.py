"""``tulip-memory metrics`` as a process of the dev stack, on a loopback port, and the
child-process plumbing the stack's other ``tulip-memory`` commands share
(:class:`LoopbackCommand`)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, ClassVar, Self

from tulip_ops.dev.flower import free_port, stop_child
from tulip_ops.dev.supervisor import die_with_parent


@dataclass
class LoopbackCommand:
    """A ``tulip-memory <command> --port=N`` child of the stack, ready once ``probe``
    answers on its loopback port."""

    env: dict[str, str]
    log: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _out: IO[bytes] | None = None
    command: ClassVar[str]
    what: ClassVar[str]
    probe: ClassVar[str]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> Self:
        self.port = self.port or free_port()
        self._out = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(  # noqa: S603 - our own command line, no shell
            [sys.executable, "-m", "tulip_ops.cli", self.command, f"--port={self.port}"],
            env=self.env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the {self.what} exited; see {self.log}")
            try:
                urllib.request.urlopen(self.base + self.probe, timeout=5).close()  # noqa: S310
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the {self.what} did not answer within {timeout}s; see {self.log}")

    def stop(self) -> None:
        stop_child(self.proc, self._out)
        self._out = None


@dataclass
class MetricsExporter(LoopbackCommand):
    command: ClassVar[str] = "metrics"
    what: ClassVar[str] = "metrics exporter"
    probe: ClassVar[str] = "/metrics"

    @property
    def url(self) -> str:
        return self.base + self.probe

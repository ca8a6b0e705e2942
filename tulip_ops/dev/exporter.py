"""``tulip-memory metrics`` as a process of the dev stack, on a loopback port."""

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


@dataclass
class MetricsExporter:
    env: dict[str, str]
    log: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    _out: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def start(self, timeout: float = 60.0) -> MetricsExporter:
        self.port = self.port or free_port()
        self._out = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(  # noqa: S603 - our own command line, no shell
            [sys.executable, "-m", "tulip_ops.cli", "metrics", f"--port={self.port}"],
            env=self.env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the metrics exporter exited; see {self.log}")
            try:
                urllib.request.urlopen(self.url, timeout=5).close()  # noqa: S310 - loopback
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"the metrics exporter did not answer within {timeout}s; see {self.log}")

    def stop(self) -> None:
        stop_child(self.proc, self._out)
        self._out = None

"""Real ``celery worker`` processes for tests that need faults: kill, restart, order.

Each worker is a single-process (``-P solo``) consumer of the queues it is given,
as in production; its output goes to a log file the test can read. Every process
started here is killed at fixture teardown.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tulip_ops.dev.supervisor import WorkerSpec

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class WorkerProcess:
    """One worker, started with the command line the supervisor of ``tulip-memory
    worker`` and ``dev`` uses (:class:`~tulip_ops.dev.supervisor.WorkerSpec`)."""

    name: str
    queues: list[str]
    env: dict[str, str]
    log: Path
    pool: str = "solo"
    concurrency: int = 1
    proc: subprocess.Popen[bytes] | None = None
    _out: object = field(default=None, repr=False)

    def start(self, ready_timeout: float = 60.0, *, wait: bool = True) -> WorkerProcess:
        out = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self._out = out
        spec = WorkerSpec(self.name, tuple(self.queues), self.pool, self.concurrency)
        self.proc = subprocess.Popen(
            spec.command(),
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        if wait:
            self._wait_ready(ready_timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"worker {self.name} exited:\n{self.output()}")
            if " ready." in self.output():
                return
            time.sleep(0.1)
        raise AssertionError(f"worker {self.name} not ready after {timeout}s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no cleanup, no ack, exactly like a crashed host."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._close()

    def stop(self, timeout: float = 30.0) -> None:
        """Warm shutdown (SIGTERM), SIGKILL if it does not stop in time."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close()

    def _close(self) -> None:
        if self._out is not None:
            self._out.close()  # type: ignore[attr-defined]
            self._out = None


@dataclass
class WorkerFactory:
    env: dict[str, str]
    tmp: Path
    started: list[WorkerProcess] = field(default_factory=list)

    def start(self, name: str, queues: list[str], **env: str) -> WorkerProcess:
        """A single-process (``-P solo``) worker on ``queues``."""
        return self._start(WorkerProcess(name, queues, {**self.env, **env}, self._log(name)))

    def start_threads(
        self, name: str, queues: list[str], threads: int, env: dict[str, str]
    ) -> WorkerProcess:
        """A ``threads`` pool worker: the key-ordered layout of the shard workers
        (their ``TULIP_*_CONCURRENCY`` in ``env``)."""
        w = WorkerProcess(name, queues, {**self.env, **env}, self._log(name), "threads", threads)
        return self._start(w)

    def _log(self, name: str) -> Path:
        return self.tmp / f"{name}.log"

    def _start(self, w: WorkerProcess) -> WorkerProcess:
        self.started.append(w)
        return w.start()

    def stop_all(self) -> None:
        for w in self.started:
            w.stop(timeout=10)


def worker_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TULIP_")}
    env.update(settings)
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[WorkerFactory]:
    """Start workers with ``workers.start(name, queues, **env)``; all stopped after."""
    factory = WorkerFactory(worker_env(), tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()

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
    _logged_before: int = field(default=0, repr=False)

    def start(self, ready_timeout: float = 120.0, *, wait: bool = True) -> WorkerProcess:
        # A worker restarted under its name appends to the same log: it is ready when
        # *this* start says so.
        self._logged_before = self.log.stat().st_size if self.log.exists() else 0
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
            self.wait_ready(ready_timeout)
        return self

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until the worker logs that it is ready (since its last start)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"worker {self.name} exited:\n{self.output()}")
            if b" ready." in self.log.read_bytes()[self._logged_before :]:
                return
            time.sleep(0.05)
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
        self.terminate()
        self.wait_stopped(timeout)

    def terminate(self) -> None:
        """Ask for a warm shutdown (SIGTERM); :meth:`wait_stopped` waits for it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float) -> None:
        """Until the process has exited, SIGKILLed after ``timeout`` seconds."""
        if self.proc is not None and self.proc.poll() is None:
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
        """A single-process (``-P solo``) worker on ``queues``, started and ready."""
        (worker,) = self.start_all([self.solo(name, queues, **env)])
        return worker

    def start_threads(
        self, name: str, queues: list[str], threads: int, env: dict[str, str]
    ) -> WorkerProcess:
        """A ``threads`` pool worker, started and ready."""
        (worker,) = self.start_all([self.threaded(name, queues, threads, env)])
        return worker

    def solo(self, name: str, queues: list[str], **env: str) -> WorkerProcess:
        """A single-process (``-P solo``) worker on ``queues``, not started yet."""
        return WorkerProcess(name, queues, {**self.env, **env}, self._log(name))

    def threaded(
        self, name: str, queues: list[str], threads: int, env: dict[str, str]
    ) -> WorkerProcess:
        """A ``threads`` pool worker: the key-ordered layout of the shard workers
        (their ``TULIP_*_CONCURRENCY`` in ``env``), not started yet."""
        return WorkerProcess(name, queues, {**self.env, **env}, self._log(name), "threads", threads)

    def start_all(self, workers: list[WorkerProcess]) -> list[WorkerProcess]:
        """Start ``workers`` side by side and return once every one is ready (a worker
        spends seconds importing before it is)."""
        for w in workers:
            self.started.append(w)
            w.start(wait=False)
        for w in workers:
            w.wait_ready()
        return workers

    def _log(self, name: str) -> Path:
        return self.tmp / f"{name}.log"

    def stop_all(self) -> None:
        """Warm shutdown of every worker, side by side."""
        for w in self.started:
            w.terminate()
        for w in self.started:
            w.wait_stopped(timeout=10)


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

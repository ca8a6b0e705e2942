"""The processes a benchmark starts, and their teardown however the run ends.

Embedded Postgres and Redis (or external ones), the model stub and the ``celery
worker`` subprocesses all register with one :class:`contextlib.ExitStack`, so an
error or Ctrl-C stops every one of them. Starting and stopping run with SIGINT and
SIGTERM deferred: an interrupt between "process started" and "process registered"
would leave the process behind.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TypeVar

from tulip_ops.dev.embedded import EmbeddedPostgres, EmbeddedRedis, run_async
from tulip_ops.dev.supervisor import WorkerSpec
from tulip_ops.provision import provision

ROOT = Path(__file__).resolve().parents[1]
APP_ROLE = "tulip_bench"
STOP_TIMEOUT = 15.0


R = TypeVar("R")


class BenchError(RuntimeError):
    """The benchmark cannot go on (a worker died, events never applied, ...)."""


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block is done, then deliver them."""
    received: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if received:
            signal.raise_signal(received[0])


def raise_on_interrupts() -> None:
    """Ctrl-C and SIGTERM unwind the main thread, so ``finally`` blocks stop what was
    started. SIGINT gets a handler of our own, not Python's default one: asyncio's
    ``Runner`` replaces only the default, and its own merely cancels the running
    task, which a driver may absorb (the interrupt is then lost)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, terminate)


def bench_main(run: Callable[[contextlib.ExitStack], R], report: Callable[[R], None]) -> int:
    """A benchmark's ``main``: ``run`` with every service it opens on ``stack``
    stopped at the end, Ctrl-C included; ``report`` prints what ``run`` returned."""
    raise_on_interrupts()
    stack = contextlib.ExitStack()
    try:
        result = run(stack)
    except BenchError as e:
        progress(f"benchmark failed: {e}")
        return 1
    except KeyboardInterrupt:
        progress("interrupted; stopping everything ...")
        return 130
    finally:
        with deferred_interrupts():
            stack.close()
    report(result)
    return 0


def progress(text: str) -> None:
    """A status line on stderr, so the report on stdout stays clean."""
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Services:
    admin_dsn: str
    app_dsn: str
    broker_url: str
    tmp: Path
    embedded_postgres: bool
    embedded_redis: bool


def open_services(
    stack: contextlib.ExitStack,
    admin_dsn: str | None,
    broker_url: str | None,
    *,
    prefix: str = "tulip-bench-pipeline-",
) -> Services:
    """Postgres and Redis: the given ones, else embedded ones in a temp dir (named
    ``prefix``...) that ``stack`` removes (after stopping them)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    stack.callback(shutil.rmtree, tmp, ignore_errors=True)
    own_postgres, own_redis = not admin_dsn, not broker_url
    if admin_dsn:
        app_dsn = run_async(provision(admin_dsn, APP_ROLE))
    else:
        postgres = EmbeddedPostgres(tmp / "postgres", keep=False)
        with deferred_interrupts():
            stack.callback(postgres.stop)
            postgres.start(APP_ROLE)
        admin_dsn, app_dsn = postgres.admin_dsn, postgres.app_dsn
    if not broker_url:
        redis_server = EmbeddedRedis(tmp / "redis")
        with deferred_interrupts():
            stack.callback(redis_server.stop)
            broker_url = redis_server.start().url
    return Services(admin_dsn, app_dsn, broker_url, tmp, own_postgres, own_redis)


@dataclass
class Worker:
    """One ``celery worker -P solo`` process, in a process group of its own."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self, lines: int = 25) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signum)


@dataclass
class WorkerPool:
    """Shard workers sharing one environment; :meth:`stop` ends them all."""

    logs: Path
    env: dict[str, str]
    workers: list[Worker] = field(default_factory=list)

    def start(
        self, app: str, name: str, queue: str, pool: str = "solo", threads: int = 1
    ) -> Worker:
        """One worker on ``queue``: solo, or a ``threads`` pool of ``threads`` (the
        key-ordered layout of ``tulip-memory worker``)."""
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        spec = WorkerSpec(
            name,
            (queue,),
            pool,
            threads,
            app=app,
            log_level="WARNING",
            events=False,
            heartbeat=False,
        )
        with deferred_interrupts(), open(log, "ab") as out:
            proc = subprocess.Popen(
                spec.command(),
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the bench, which stops them in order
            )
            worker = Worker(name, proc, log)
            self.workers.append(worker)
        return worker

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def check(self) -> None:
        """Raise if a worker exited: a benchmark without it would measure nothing."""
        for w in self.workers:
            if w.proc.poll() is not None:
                raise BenchError(f"worker {w.name} exited ({w.proc.returncode}):\n{w.tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Warm shutdown (SIGTERM) of every worker at once; SIGKILL what outlives ``timeout``."""
        with deferred_interrupts():
            for w in self.workers:
                w.signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for w in self.workers:
                try:
                    w.proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    w.signal(signal.SIGKILL)
                    w.proc.wait()
            self.workers.clear()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _serve_model_stub(
    embedding_dim: int, embedding_delay: float, out: Connection, stop: Any
) -> None:
    """The stub's process: serve until ``stop`` is set; the URL goes out first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the bench stops us, in order
    from tests.support.openai_server import FakeOpenAI

    with FakeOpenAI(embedding_dim=embedding_dim, embedding_delay=embedding_delay) as fake:
        out.send(fake.url)
        out.close()
        stop.wait()


def model_stub_process(
    stack: contextlib.ExitStack, *, embedding_dim: int, embedding_delay: float
) -> str:
    """An OpenAI-compatible embedding server (``FakeOpenAI``) answering every request
    after ``embedding_delay`` seconds, in a process of its own, as a model server is
    another machine's CPU and not the benchmark's interpreter; its ``api_base``.
    ``stack`` stops it."""
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_serve_model_stub,
        args=(embedding_dim, embedding_delay, send, stop),
        name="bench-model-stub",
        daemon=True,
    )

    def halt() -> None:
        stop.set()
        proc.join(STOP_TIMEOUT)
        if proc.is_alive():
            proc.kill()
            proc.join()

    with deferred_interrupts():
        proc.start()
        stack.callback(halt)
    send.close()
    try:
        if recv.poll(60.0):
            return str(recv.recv())
    except EOFError:
        pass
    raise BenchError(f"the model stub did not start (exit code {proc.exitcode})")

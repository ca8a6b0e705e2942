"""Run the Celery workers of a role as ``celery worker`` processes, and keep them up.

Ordered roles (``extract``, ``checkpoint``) get one worker process per shard queue,
named ``extract-<k>@host`` so Flower shows which shard is which: exactly one consumer
per shard, running many keys' events at once and each key's in order
(``tulip_workers.keyed``), is what keeps events of a namespace in order. A worker that
dies is restarted (its unacked messages are moved back to the front of its queue by
``tulip_workers.redelivery`` before it consumes). Stopping sends SIGTERM, Celery's warm
shutdown: the tasks in hand finish and are acknowledged, nothing is lost; a worker
still busy after the grace period is killed, and its message is redelivered.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from tulip_memory.env import EMBED_THREADS
from tulip_wire.events import CHECKPOINT_SAVED, SESSION_ENDED
from tulip_wire.topology import (
    CHECKPOINT_QUEUE_PREFIX,
    EXTRACT_QUEUE_PREFIX,
    REINDEX_QUEUE,
    SUMMARIZE_QUEUE,
)
from tulip_workers.keyed import BUFFER_PER_SLOT
from tulip_workers.settings import CONCURRENCY

log = logging.getLogger(__name__)


class PoolMembership(Protocol):
    """What a supervisor asks of a shard pool membership (:class:`tulip_ops.claim.Claim`,
    which imports this module for the worker specs, so it is named here by shape)."""

    role: str

    def tick(self, workers: Any) -> list[int]: ...

    def leave(self) -> None: ...


#: Ordered roles (one solo worker per shard queue ``<prefix>.<k>``).
ROLES = {"extract": EXTRACT_QUEUE_PREFIX, "checkpoint": CHECKPOINT_QUEUE_PREFIX}
#: Unordered roles: one pooled worker on one queue.
POOLED = {"summarize": SUMMARIZE_QUEUE, "reindex": REINDEX_QUEUE}
POOL_CONCURRENCY = 2
#: The event type each ordered role runs.
ROLE_EVENTS = {"extract": SESSION_ENDED, "checkpoint": CHECKPOINT_SAVED}


@dataclass(frozen=True)
class WorkerSpec:
    """One ``celery worker`` process: the one command line that ``tulip-memory worker``,
    the dev stack, the tests and the benchmarks start workers with."""

    name: str
    queues: tuple[str, ...]
    pool: str = "solo"
    concurrency: int = 1
    env: tuple[tuple[str, str], ...] = ()
    app: str = "tulip_workers.app"
    log_level: str = "INFO"
    #: Task events for Flower (``-E``).
    events: bool = True
    #: Worker heartbeats; a benchmark or test that reads no liveness turns them off.
    heartbeat: bool = True

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "celery", "-A", self.app, "worker",
            "-P", self.pool, "-c", str(self.concurrency), "-Q", ",".join(self.queues),
            "-n", f"{self.name}@%h", *(("-E",) if self.events else ()),
            "--without-gossip", "--without-mingle",
            *(() if self.heartbeat else ("--without-heartbeat",)),
            "-l", self.log_level,
        ]  # fmt: skip


def role_specs(
    role: str, shards: int, only: Sequence[int] | None = None, concurrency: int | None = None
) -> list[WorkerSpec]:
    """The workers of ``role``: one per shard for ordered roles, one pool otherwise.

    An ordered worker runs ``concurrency`` events at once (default: its setting,
    :data:`tulip_workers.settings.CONCURRENCY`) in a ``threads`` pool that reserves
    :data:`BUFFER_PER_SLOT` times as many, each key's events in order."""
    if role in POOLED:
        return [
            WorkerSpec(
                role, (POOLED[role],), "prefork", POOL_CONCURRENCY, pool_threads(POOL_CONCURRENCY)
            )
        ]
    if role not in ROLES:
        known = ", ".join(sorted([*ROLES, *POOLED]))
        raise ValueError(f"unknown worker role {role!r}; known roles: {known}")
    chosen = list(range(shards)) if not only else list(only)
    bad = [str(k) for k in chosen if not 0 <= k < shards]
    if bad:
        raise ValueError(
            f"--shards {' '.join(bad)} out of range: {role} has shards 0..{shards - 1} "
            f"(TULIP_{role.upper()}_SHARDS={shards})"
        )
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    var = CONCURRENCY[ROLE_EVENTS[role]]
    c = concurrency or var.read()
    env = ((var.name, str(c)),)
    return [
        WorkerSpec(f"{role}-{k}", (f"{ROLES[role]}.{k}",), "threads", c * BUFFER_PER_SLOT, env)
        for k in chosen
    ]


def pool_threads(processes: int) -> tuple[tuple[str, str], ...]:
    """``TULIP_EMBED_THREADS`` for a pool of ``processes``: each its share of the cores,
    unless the environment says otherwise. A local model in each child would otherwise
    run a thread per core in every one (see :mod:`tulip_memory.embeddings.local`)."""
    if EMBED_THREADS.read() is not None:
        return ()
    return ((EMBED_THREADS.name, str(max(1, (os.cpu_count() or 1) // processes))),)


@dataclass
class _Running:
    spec: WorkerSpec
    proc: subprocess.Popen[bytes]
    started: float
    restarts: int = 0


@dataclass
class Supervisor:
    specs: list[WorkerSpec]
    env: dict[str, str]
    log_dir: Path | None = None
    min_uptime: float = 5.0
    #: Shard pools this supervisor is a member of (``--claim``): their workers come and
    #: go with the assignment (:mod:`tulip_ops.claim`).
    claims: Sequence[PoolMembership] = field(default_factory=list)
    _running: dict[str, _Running] = field(default_factory=dict)
    _retiring: list[_Running] = field(default_factory=list)
    _logs: list[IO[bytes]] = field(default_factory=list)

    def start(self) -> Supervisor:
        for spec in self.specs:
            self._spawn(spec, restarts=0)
        self._claim()
        return self

    def add(self, spec: WorkerSpec) -> None:
        """Start one more worker (a shard a claim gained)."""
        self._spawn(spec, restarts=0)

    def retire(self, name: str) -> None:
        """SIGTERM one worker (a shard a claim lost) and restart it no more."""
        r = self._running.pop(name, None)
        if r is not None and r.proc.poll() is None:
            r.proc.send_signal(signal.SIGTERM)
            self._retiring.append(r)

    def _claim(self) -> None:
        for claim in self.claims:
            try:
                claim.tick(self)
            except Exception as e:  # Redis away: keep the shards as they are
                log.warning("could not renew the %s pool membership (%s)", claim.role, e)

    def _spawn(self, spec: WorkerSpec, restarts: int) -> None:
        out: IO[bytes] | None = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self.log_dir / f"{spec.name}.log", "ab")  # noqa: SIM115 - kept open
            self._logs.append(out)
        proc = subprocess.Popen(  # noqa: S603 - our own command line, no shell
            spec.command(),
            env={**self.env, **dict(spec.env)},
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            preexec_fn=die_with_parent,
        )
        self._running[spec.name] = _Running(spec, proc, time.monotonic(), restarts)

    def pids(self) -> dict[str, int]:
        return {name: r.proc.pid for name, r in self._running.items()}

    def check(self) -> list[str]:
        """Restart workers that exited; returns the names restarted. A worker that
        keeps dying right after start is restarted no faster than ``min_uptime``."""
        self._claim()
        self._retiring = [r for r in self._retiring if r.proc.poll() is None]
        restarted = []
        for name, r in list(self._running.items()):
            code = r.proc.poll()
            if code is None:
                continue
            if time.monotonic() - r.started < self.min_uptime:
                continue  # crash loop: wait before the next try
            log.warning("worker %s exited with %s; restarting", name, code)
            self._spawn(r.spec, r.restarts + 1)
            restarted.append(name)
        return restarted

    def stop(self, grace: float = 30.0) -> None:
        """Warm shutdown of every worker; SIGKILL after ``grace`` seconds."""
        for claim in self.claims:
            try:
                claim.leave()
            except Exception as e:
                log.warning("could not leave the %s pool (%s)", claim.role, e)
        for r in self._running.values():
            if r.proc.poll() is None:
                r.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for r in [*self._running.values(), *self._retiring]:
            try:
                r.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker %s did not stop in %.0fs; killing it", r.spec.name, grace)
                r.proc.kill()
                r.proc.wait()
        for out in self._logs:
            out.close()
        self._logs.clear()


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM it (a warm shutdown) if the supervisor dies,
    even by SIGKILL, so no worker outlives the process that started it (Linux)."""
    if sys.platform != "linux":
        return
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


def worker_env(settings: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **settings}

"""A worker's CPU priority: batch work yields a shared host's cores to the request path.

A reindex worker's model takes every core it is given (``bench.reindex --model local``:
two workers of one thread each keep both cores of a 2-core host busy), and on a host
it shares with the database or the shard workers that makes recall and extraction
wait for a core. So a worker whose queues are all batch queues (``memory.reindex``)
runs at a lower priority, :data:`BATCH_NICE` unless ``TULIP_WORKER_NICE`` says
otherwise (0 keeps the default priority; any worker can be given one).

Applied in the worker's main process before it consumes (``celeryd_after_setup``, so
before a prefork pool forks its children, which inherit it):

- the process's niceness (``os.nice``, which Linux applies to the calling thread and
  to the threads and processes it starts after);
- on Linux, when the process leads its own session, its scheduler **autogroup**'s
  niceness too: with ``sched_autogroup_enabled`` the scheduler shares the cores
  between sessions first and only then by niceness within each, so a worker started
  in a session of its own (``setsid``, a supervisor's ``start_new_session``) is not
  lowered against the database's session by its niceness alone. A worker in another
  session's group (started from a shell) leaves that group as it is.

Containers are scheduled by their cgroup's CPU weight before either: a compose or
Kubernetes deployment gives the reindex service a lower ``cpu_shares``/CPU request
(``docker-compose.yml`` does), and the niceness then orders processes inside it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from celery import Celery, signals

from tulip_memory.env import Env, Var, integer
from tulip_wire.topology import REINDEX_QUEUE

log = logging.getLogger(__name__)

#: Queues of batch work, whose workers run at :data:`BATCH_NICE` by default.
BATCH_QUEUES = frozenset({REINDEX_QUEUE})
#: The niceness of a worker that consumes only batch queues.
BATCH_NICE = 10
AUTOGROUP = Path("/proc/self/autogroup")


def niceness(raw: str) -> int:
    value = integer(raw)
    if not 0 <= value <= 19:
        raise ValueError("must be an integer from 0 (the default priority) to 19 (the lowest)")
    return value


#: Unset: :data:`BATCH_NICE` for a worker of batch queues only, else 0.
WORKER_NICE = Var[int | None]("TULIP_WORKER_NICE", None, niceness)


def nice_for(queues: Iterable[str], env: Env | None = None) -> int:
    """The niceness of a worker consuming ``queues``."""
    chosen = WORKER_NICE.read(env)
    if chosen is not None:
        return chosen
    names = set(queues)
    return BATCH_NICE if names and names <= BATCH_QUEUES else 0


def lower_priority(nice: int, autogroup: Path = AUTOGROUP) -> int:
    """Raise this process's niceness by ``nice`` and, when it leads its session, its
    autogroup's to the same; returns the process's niceness after."""
    if nice <= 0:
        return os.nice(0)
    after = os.nice(nice)
    if os.getsid(0) == os.getpid():
        try:
            autogroup.write_text(f"{after}\n")
        except OSError as e:  # no autogroups (kernel, or a container's /proc): niceness only
            log.debug("autogroup niceness not set: %s", e)
    return after


def install(app: Celery) -> None:
    """Lower each worker of ``app`` to its queues' priority before it consumes."""

    def lower_before_consuming(instance: Any = None, **_: Any) -> None:
        if instance is None or instance.app is not app:
            return
        queues = list(instance.app.amqp.queues.consume_from)
        nice = nice_for(queues)
        if nice:
            after = lower_priority(nice)
            log.info("worker on %s runs at niceness %d (batch work)", ",".join(queues), after)

    signals.celeryd_after_setup.connect(
        lower_before_consuming, weak=False, dispatch_uid=f"tulip-priority-{id(app)}"
    )

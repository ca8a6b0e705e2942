"""A worker's CPU priority: batch work yields a shared host's cores to the request path.

A reindex worker's model takes every core it is given (``bench.reindex --model local``:
two workers of one thread each keep both cores of a 2-core host busy), and on a host
it shares with the database or the shard workers that makes recall and extraction
wait for a core. So a worker whose queues are all batch queues (``memory.reindex``)
runs at a lower priority: niceness :data:`BATCH_NICE` unless ``TULIP_WORKER_NICE``
says otherwise (any worker can be given one; 0 leaves a worker as it was started). A
worker started at a niceness above its level keeps it.

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
from celery.exceptions import WorkerShutdown

from tulip_memory.env import Env
from tulip_wire.topology import REINDEX_QUEUE
from tulip_workers.redelivery import EXIT_FAILURE
from tulip_workers.settings import WORKER_NICE

log = logging.getLogger(__name__)

#: Queues of batch work, whose workers run at :data:`BATCH_NICE` by default.
BATCH_QUEUES = frozenset({REINDEX_QUEUE})
#: The niceness of a worker that consumes only batch queues.
BATCH_NICE = 10
AUTOGROUP = Path("/proc/self/autogroup")


def nice_for(queues: Iterable[str], env: Env | None = None) -> int:
    """The niceness of a worker consuming ``queues``."""
    chosen = WORKER_NICE.read(env)
    if chosen is not None:
        return chosen
    names = set(queues)
    return BATCH_NICE if names and names <= BATCH_QUEUES else 0


def lower_priority(nice: int, autogroup: Path = AUTOGROUP) -> int:
    """Lower this process to niceness ``nice`` (one already lower stays) and, when it
    leads its session, its autogroup to the same; returns the process's niceness."""
    now = os.nice(0)
    if nice <= now:
        return now
    after = os.nice(nice - now)
    if os.getsid(0) == os.getpid():
        try:
            autogroup.write_text(f"{after}\n")
        except OSError as e:  # no autogroups (kernel, or a container's /proc): niceness only
            log.debug("autogroup niceness not set: %s", e)
    return after


def install(app: Celery) -> None:
    """Lower each worker of ``app`` to its queues' priority before it consumes (a
    malformed ``TULIP_WORKER_NICE`` stops it: ``WorkerShutdown``, the variable named)."""

    def lower_before_consuming(instance: Any = None, **_: Any) -> None:
        if instance is None or instance.app is not app:
            return
        queues = list(instance.app.amqp.queues.consume_from)
        try:
            nice = nice_for(queues)
        except ValueError as e:  # a malformed TULIP_WORKER_NICE: refuse to start
            log.critical("%s", e)
            raise WorkerShutdown(EXIT_FAILURE) from e
        if nice:
            after = lower_priority(nice)
            log.info("worker on %s runs at niceness %d (batch work)", ",".join(queues), after)

    signals.celeryd_after_setup.connect(
        lower_before_consuming, weak=False, dispatch_uid=f"tulip-priority-{id(app)}"
    )

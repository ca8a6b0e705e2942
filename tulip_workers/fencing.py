"""Fencing tokens: a shard worker changes its queue's state only while it holds the lease.

A shard queue's owner holds its lease (:mod:`tulip_workers.lease`), which carries a
fencing token that grows at every takeover. Every script that changes the queue's
state on Redis, the consume, the unacked write, the ack, parking and taking back, the
restore, runs behind ``lua/fence.lua``: it does nothing, and fails with
``FENCED``, unless the lease still carries this process's token. So an owner
paused past its lease (SIGSTOP, a GC pause, a partition) that wakes up after a standby
took over consumes and acks nothing more, whatever its threads were doing: the first
script it runs fails, and :func:`lost` ends the process at once, without acking what it
holds (the new owner restored all of it, in order, before it consumed).

Besides, a task thread checks :func:`valid` before it runs an event: the lease's local
deadline (the last renewal's start plus the lease length, on the monotonic clock, which
goes on while a process is stopped), so a woken thread does not begin a model call the
new owner also makes.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass
from time import monotonic
from typing import Any, NoReturn

import redis

from tulip_wire.scripts import lua

log = logging.getLogger(__name__)

#: The exit status of a worker that lost its lease (its supervisor starts it again, as a
#: standby).
EXIT_FENCED = 75
#: The error a fenced script replies with.
FENCED_REPLY = "FENCED the lease"
_GUARD = lua(__file__, "fence.lua")


class Fenced(Exception):
    """A script of a leased queue refused: the lease is no longer this process's."""


@dataclass
class Fence:
    """This process's lease of one queue: its key, its token, and until when (monotonic)
    it is surely still ours."""

    queue: str
    key: str
    token: str
    deadline: float

    def valid(self) -> bool:
        return monotonic() < self.deadline


_fences: dict[str, Fence] = {}
_lock = threading.Lock()


def guarded(script: str) -> str:
    """``script`` behind ``lua/fence.lua``: called with the lease key as its last key and
    the token as its last argument."""
    return _GUARD + "\n" + script


def hold(fence: Fence) -> None:
    """From now on this process's scripts on ``fence.queue`` are fenced by its token."""
    with _lock:
        _fences[fence.queue] = fence


def fence_of(queue: str) -> Fence | None:
    """The fence of ``queue`` in this process, if it consumes ``queue`` under a lease."""
    return _fences.get(queue)


def valid() -> bool:
    """Whether every lease this process holds is surely still its own (locally)."""
    return all(f.valid() for f in list(_fences.values()))


def run(script: Any, queue: str, keys: list[Any], args: list[Any], client: Any = None) -> Any:
    """``script`` (a registered :func:`guarded` script) on ``queue``'s keys, fenced by this
    process's token; :func:`lost` when the lease is not ours any more."""
    fence = _fences[queue]
    try:
        return script(keys=[*keys, fence.key], args=[*args, fence.token], client=client)
    except redis.ResponseError as e:
        if FENCED_REPLY in str(e):
            lost(queue, "a script was fenced")
        raise


def lost(queue: str, why: str) -> NoReturn:
    """The lease of ``queue`` is another's now: end this process at once, acking nothing.

    Everything it held (unacked, delivering, parked) is the new owner's, restored to
    the head of the queue in order; a warm shutdown would ack or restore it again."""
    log.critical(
        "lost the lease of %s (%s): another worker owns it now; exiting without acking "
        "what this one holds (its supervisor starts it again as a standby)",
        queue,
        why,
    )
    end(EXIT_FENCED)


def end(status: int) -> NoReturn:
    """End this process at once with ``status``, its logs flushed (no warm shutdown: it
    would ack or restore what is the queue's next owner's)."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)

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

Besides, a task thread waits for :func:`valid` before it runs an event: the lease's
local deadline (the last renewal's start plus the lease length, on the monotonic clock,
which goes on while a process is stopped), so a woken thread does not begin a model call
the new owner also makes; it waits until the keeper renews the lease (or takes it back:
:meth:`Fence.regain`), or ends the process when it cannot.

A refused script first tries to take the lease back (:meth:`Fence.regain`): a lease that
lapsed while its owner could not reach Redis (a Redis restart, an outage longer than the
lease) and that nobody took since (the fencing-token counter is still at this owner's
token) is still this owner's to keep, with the same token.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
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
    #: Renews the lease, or takes it back with this token if nobody took it since it
    #: lapsed; False when it is another's (the lease keeper's, :mod:`tulip_workers.lease`).
    keep: Callable[[], bool] | None = field(default=None, compare=False)

    def valid(self) -> bool:
        return monotonic() < self.deadline

    def regain(self) -> bool:
        """After a refused script: whether the lease is this process's again (kept or
        taken back with the same token), so the script can run again."""
        try:
            return self.keep is not None and self.keep()
        except redis.RedisError:
            return False


_fences: dict[str, Fence] = {}
_lock = threading.Lock()
_renewed = threading.Condition()


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


def renewed(fence: Fence, deadline: float) -> None:
    """``fence`` is surely this process's until ``deadline``: threads waiting in
    :func:`await_valid` go on."""
    with _renewed:
        fence.deadline = deadline
        _renewed.notify_all()


def await_valid() -> None:
    """Return once every lease this process holds is surely its own (at once, mostly).

    A lease past its local deadline is being renewed by its keeper, which either renews
    it (or takes it back) or ends the process: the caller starts nothing until then."""
    if valid():
        return
    log.warning("a shard lease is past its deadline: the next event waits for its renewal")
    with _renewed:
        _renewed.wait_for(valid)


def run(script: Any, queue: str, keys: list[Any], args: list[Any], client: Any = None) -> Any:
    """``script`` (a registered :func:`guarded` script) on ``queue``'s keys, fenced by this
    process's token; run again once the lease is taken back (:meth:`Fence.regain`);
    :func:`lost` when the lease is another's."""
    fence = _fences[queue]
    try:
        return script(keys=[*keys, fence.key], args=[*args, fence.token], client=client)
    except redis.ResponseError as e:
        if FENCED_REPLY not in str(e):
            raise
        if not fence.regain():
            lost(queue, "a script was fenced")
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

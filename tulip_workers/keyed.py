"""Key-ordered concurrency inside one worker process: many events in flight, each key's
events one at a time and in delivery order.

A shard queue has one consumer process. That process reserves up to ``buffer`` messages
(Celery's ``threads`` pool of ``buffer`` threads, prefetch 1 per thread, ``acks_late``)
and runs at most ``slots`` of them at once. The consumer receives messages in queue
order on one thread; :meth:`KeyOrder.admit` runs there (Celery's ``task_received``
signal) and appends each task to its key's FIFO. A task body runs inside
:meth:`KeyOrder.turn`, which waits until the task heads its key's FIFO *and* a slot is
free, so:

- events of one key never overlap and run in the order the queue delivered them (the
  producer's publish order; after a crash the redelivery restore puts unacked messages
  back oldest first, before anything is consumed);
- events of other keys go past a busy key: a hot key's backlog waits in its FIFO,
  holding threads but no slots, so it delays other keys only when its backlog fills the
  whole buffer. Then Celery stops reserving (prefetch is spent) until one of its events
  finishes: nothing is dropped, nothing taken out of order;
- each message stays unacknowledged until its own task finished (``acks_late``), so a
  SIGKILL loses nothing and the ledger makes the redelivery a no-op where it was done.

A task that may have killed a worker (it was running when one died) runs *alone*
(``exclusive``): it waits until nothing else runs and nothing starts beside it, so if it
kills this worker too, the death is counted against it and no innocent neighbour
(``tulip_workers.redelivery``).

A task that was admitted but will never run (revoked, rejected, its worker shutting
down) would block its key forever; :meth:`turn` therefore drops a head the
``is_live`` callback (the worker's reserved and active requests) no longer knows.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tulip_wire.events import tenant_of_key

#: Messages an ordered worker reserves per event it may run: the buffer that lets other
#: keys go past a hot key's backlog.
BUFFER_PER_SLOT = 4

#: How often a waiting task re-checks for a head that will never run.
RECHECK_SECONDS = 1.0
#: A head younger than this is never taken for dead: Celery announces a task
#: (``task_received``) just before it records it as reserved.
GRACE_SECONDS = 30.0
#: Tenants whose last turn is remembered at most (those with work admitted first).
MAX_TURNS_KEPT = 4096
#: A body larger than this is not parsed for its key on the consumer thread.
MAX_KEY_PARSE_BYTES = 4 * 1024 * 1024


class KeyOrder:
    """Per-key FIFOs of admitted task ids, and ``slots`` tasks running at most, handed
    out fairly across tenants (see :meth:`_dispatch`)."""

    def __init__(
        self,
        slots: int,
        is_live: Callable[[str], bool] | None = None,
        on_release: Callable[[str], None] | None = None,
        *,
        tenant_share: float | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = slots
        #: Slots one tenant may hold at once (``TULIP_TENANT_MAX_INFLIGHT``'s share).
        self.tenant_cap = tenant_cap(tenant_share, slots)
        self._is_live = is_live or (lambda _task_id: True)
        #: Told each key whose task finished or was forgotten (outside the lock).
        self._on_release = on_release or (lambda _key: None)
        self._lock = threading.RLock()
        #: Each waiting task's own condition on the same lock, and whether it runs alone.
        self._waiters: dict[str, tuple[threading.Condition, bool]] = {}
        #: Waiting tasks given a slot (counted as running), not yet woken.
        self._granted: set[str] = set()
        self._fifos: dict[str, deque[str]] = {}
        self._key_of: dict[str, str] = {}
        self._admitted: dict[str, float] = {}
        self._running = 0
        self._alone = False
        #: Slots each tenant holds, and when each was last given one (its turn).
        self._tenant_running: dict[str, int] = {}
        #: Tasks each tenant has admitted and not finished.
        self._tenant_held: dict[str, int] = {}
        self._served: dict[str, int] = {}
        self._turns = 0
        self.peak_running = 0

    def admit(self, task_id: str, key: str) -> None:
        """Queue ``task_id`` behind the earlier tasks of ``key`` (delivery order)."""
        with self._lock:
            if task_id in self._key_of:
                return
            self._key_of[task_id] = key
            self._admitted[task_id] = time.monotonic()
            self._fifos.setdefault(key, deque()).append(task_id)
            tenant = tenant_of_key(key)
            self._tenant_held[tenant] = self._tenant_held.get(tenant, 0) + 1

    def forget(self, task_id: str) -> None:
        """``task_id`` will not run: let the tasks behind it go."""
        with self._lock:
            key = self._remove(task_id)
            self._dispatch()
        if key is not None:
            self._on_release(key)

    @contextmanager
    def turn(self, task_id: str, key: str, *, exclusive: bool = False) -> Iterator[None]:
        """Wait for ``task_id``'s turn on its key and a slot given to it, then hold both;
        ``exclusive``: wait until nothing else runs, and let nothing start meanwhile."""
        with self._lock:
            self.admit(task_id, key)
            key = self._key_of[task_id]
            waiting = threading.Condition(self._lock)
            self._waiters[task_id] = (waiting, exclusive)
            try:
                self._dispatch()
                while task_id not in self._granted:
                    waiting.wait(RECHECK_SECONDS)
                    self._dispatch()  # a head that will never run is dropped here
            finally:
                del self._waiters[task_id]
            self._granted.discard(task_id)
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                self._alone = False
                tenant = tenant_of_key(key)
                self._tenant_running[tenant] -= 1
                if not self._tenant_running[tenant]:
                    del self._tenant_running[tenant]
                self._remove(task_id)
                self._dispatch()
            self._on_release(key)

    def held(self, key: str) -> int:
        """Tasks of ``key`` admitted and not finished (the running one included)."""
        with self._lock:
            fifo = self._fifos.get(key)
            return len(fifo) if fifo else 0

    def held_by_tenant(self, tenant: str) -> int:
        """Tasks of ``tenant``'s keys admitted and not finished."""
        with self._lock:
            return self._tenant_held.get(tenant, 0)

    def waiting(self) -> int:
        """Admitted tasks not finished (running ones included)."""
        with self._lock:
            return len(self._key_of)

    def _dispatch(self) -> None:
        """Give the free slots to waiting heads, one at a time, each to the tenant that
        has waited longest for its turn: among the tenants with a head waiting (and
        under their ceiling), the one given a slot least recently; within a tenant,
        its head admitted first. So a tenant with many keys waiting gets one slot in
        turn with each other tenant waiting, not every slot its backlog's age would
        win, and per-key order is untouched (only a key's head ever runs). Only the
        granted task is woken: the tasks behind a head (a hot key's backlog) sleep
        on (waking every waiter on every finish cost a shard worker with 4C threads a
        few thousand wake-ups a second at C = 32)."""
        while not self._alone and self._running < self.slots:
            chosen = self._next()
            if chosen is None:
                return
            waiter, exclusive = self._waiters[chosen]
            if exclusive and self._running > 0:
                return  # it runs alone: nothing else starts until it has
            tenant = tenant_of_key(self._key_of[chosen])
            self._granted.add(chosen)
            self._running += 1
            self._alone = exclusive
            self._tenant_running[tenant] = self._tenant_running.get(tenant, 0) + 1
            self._turns += 1
            self._served[tenant] = self._turns
            self.peak_running = max(self.peak_running, self._running)
            waiter.notify()

    def _next(self) -> str | None:
        """The waiting head whose tenant's turn it is (see :meth:`_dispatch`)."""
        best: tuple[int, float, str] | None = None
        for key in list(self._fifos):
            head = self._live_head(key)
            if head is None or head not in self._waiters or head in self._granted:
                continue
            tenant = tenant_of_key(key)
            if self._tenant_running.get(tenant, 0) >= self.tenant_cap:
                continue
            rank = (self._served.get(tenant, 0), self._admitted.get(head, 0.0), head)
            if best is None or rank < best:
                best = rank
        if (best is None and not self._waiters) or len(self._served) > MAX_TURNS_KEPT:
            # no one waits (every tenant's turn starts afresh), or too many to keep:
            # those with nothing admitted here lose their place
            held = {tenant_of_key(key) for key in self._fifos}
            self._served = {t: n for t, n in self._served.items() if t in held}
        return None if best is None else best[2]

    def _live_head(self, key: str) -> str | None:
        """``key``'s head, after dropping heads that will never run."""
        fifo = self._fifos.get(key)
        while fifo and fifo[0] not in self._waiters and self._dead(fifo[0]):
            self._forget_head(fifo)
        if not fifo:
            self._fifos.pop(key, None)
            return None
        return fifo[0]

    def _dead(self, head: str) -> bool:
        young = time.monotonic() - self._admitted.get(head, 0.0) < GRACE_SECONDS
        return not young and not self._is_live(head)

    def _forget_head(self, fifo: deque[str]) -> None:
        head = fifo.popleft()
        self._admitted.pop(head, None)
        if (key := self._key_of.pop(head, None)) is not None:
            self._unhold(key)

    def _remove(self, task_id: str) -> str | None:
        self._admitted.pop(task_id, None)
        key = self._key_of.pop(task_id, None)
        if key is None:
            return None
        fifo = self._fifos[key]
        fifo.remove(task_id)
        if not fifo:
            del self._fifos[key]
        self._unhold(key)
        return key

    def _unhold(self, key: str) -> None:
        tenant = tenant_of_key(key)
        left = self._tenant_held.get(tenant, 0) - 1
        if left > 0:
            self._tenant_held[tenant] = left
        else:
            self._tenant_held.pop(tenant, None)


def tenant_cap(share: float | None, limit: int) -> int:
    """What one tenant may hold of ``limit`` at ``share`` (``None``: all of it; at
    least one)."""
    return limit if share is None else max(1, int(share * limit))


def envelope_key(body: object, fallback: str) -> str:
    """The ordering key an event's body claims (``key`` of the envelope JSON), or
    ``fallback`` (the task id: no ordering constraint) for a body that is not one.

    Runs on the consumer thread for every message, so it never raises: a malformed or
    forged body is the task's to dead-letter, not the consumer's to choke on."""
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            return fallback
    if not isinstance(body, str) or len(body) > MAX_KEY_PARSE_BYTES:
        return fallback
    try:
        key = json.loads(body).get("key")
    except (ValueError, AttributeError, RecursionError):
        return fallback
    return key if isinstance(key, str) and key else fallback

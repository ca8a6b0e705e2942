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

#: Messages an ordered worker reserves per event it may run: the buffer that lets other
#: keys go past a hot key's backlog.
BUFFER_PER_SLOT = 4

#: How often a waiting task re-checks for a head that will never run.
RECHECK_SECONDS = 1.0
#: A head younger than this is never taken for dead: Celery announces a task
#: (``task_received``) just before it records it as reserved.
GRACE_SECONDS = 30.0
#: A body larger than this is not parsed for its key on the consumer thread.
MAX_KEY_PARSE_BYTES = 4 * 1024 * 1024


class KeyOrder:
    """Per-key FIFOs of admitted task ids, and ``slots`` tasks running at most."""

    def __init__(
        self,
        slots: int,
        is_live: Callable[[str], bool] | None = None,
        on_release: Callable[[str], None] | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = slots
        self._is_live = is_live or (lambda _task_id: True)
        #: Told each key whose task finished or was forgotten (outside the lock).
        self._on_release = on_release or (lambda _key: None)
        self._lock = threading.RLock()
        #: Each waiting task's own condition on the same lock, and whether it runs alone.
        self._waiters: dict[str, tuple[threading.Condition, bool]] = {}
        self._fifos: dict[str, deque[str]] = {}
        self._key_of: dict[str, str] = {}
        self._admitted: dict[str, float] = {}
        self._running = 0
        self._alone = False
        self.peak_running = 0

    def admit(self, task_id: str, key: str) -> None:
        """Queue ``task_id`` behind the earlier tasks of ``key`` (delivery order)."""
        with self._lock:
            if task_id in self._key_of:
                return
            self._key_of[task_id] = key
            self._admitted[task_id] = time.monotonic()
            self._fifos.setdefault(key, deque()).append(task_id)

    def forget(self, task_id: str) -> None:
        """``task_id`` will not run: let the tasks behind it go."""
        with self._lock:
            key = self._remove(task_id)
            self._wake()
        if key is not None:
            self._on_release(key)

    @contextmanager
    def turn(self, task_id: str, key: str, *, exclusive: bool = False) -> Iterator[None]:
        """Wait for ``task_id``'s turn on its key and a free slot, then hold both;
        ``exclusive``: wait until nothing else runs, and let nothing start meanwhile."""
        with self._lock:
            self.admit(task_id, key)
            key = self._key_of[task_id]
            if not self._may_run(task_id, key, exclusive):
                waiting = threading.Condition(self._lock)
                self._waiters[task_id] = (waiting, exclusive)
                try:
                    while not self._may_run(task_id, key, exclusive):
                        waiting.wait(RECHECK_SECONDS)
                finally:
                    del self._waiters[task_id]
            self._running += 1
            self._alone = exclusive
            self.peak_running = max(self.peak_running, self._running)
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                self._alone = False
                self._remove(task_id)
                self._wake()
            self._on_release(key)

    def held(self, key: str) -> int:
        """Tasks of ``key`` admitted and not finished (the running one included)."""
        with self._lock:
            fifo = self._fifos.get(key)
            return len(fifo) if fifo else 0

    def waiting(self) -> int:
        """Admitted tasks not finished (running ones included)."""
        with self._lock:
            return len(self._key_of)

    def _wake(self) -> None:
        """Wake the waiting tasks that may run now, as many as there are free slots,
        oldest key first. Only a key's head can run, so the tasks behind a head (a hot
        key's backlog) sleep on: waking every waiter on every finish cost a shard worker
        with 4C threads a wake-up of each, a few thousand a second at C = 32. A head a
        dead one blocks is found by its own recheck."""
        free = 0 if self._alone else self.slots - self._running
        for key in list(self._fifos):
            if free <= 0:
                return
            fifo = self._fifos.get(key)
            if not fifo or (waiter := self._waiters.get(fifo[0])) is None:
                continue
            if self._may_run(fifo[0], key, waiter[1]):
                waiter[0].notify()
                free -= 1

    def _may_run(self, task_id: str, key: str, exclusive: bool) -> bool:
        fifo = self._fifos[key]
        while fifo[0] != task_id and self._dead(fifo[0]):
            self._forget_head(fifo)
        if fifo[0] != task_id or self._alone:
            return False
        return self._running == 0 if exclusive else self._running < self.slots

    def _dead(self, head: str) -> bool:
        young = time.monotonic() - self._admitted.get(head, 0.0) < GRACE_SECONDS
        return not young and not self._is_live(head)

    def _forget_head(self, fifo: deque[str]) -> None:
        head = fifo.popleft()
        self._key_of.pop(head, None)
        self._admitted.pop(head, None)

    def _remove(self, task_id: str) -> str | None:
        self._admitted.pop(task_id, None)
        key = self._key_of.pop(task_id, None)
        if key is None:
            return None
        fifo = self._fifos[key]
        fifo.remove(task_id)
        if not fifo:
            del self._fifos[key]
        return key


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

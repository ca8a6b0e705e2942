"""Background extraction jobs: in order per key, bounded in number, drainable.

Each key (a namespace) has one worker task that runs its jobs one after another, in
submission order; a shared semaphore bounds how many jobs run at once across keys.
A job runs in the context copied when it was submitted, so it keeps the caller's
context variables (the memory scope). Failures are the job's to report; one that
escapes anyway is logged and the key's next job still runs.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable

from tulip_memory.redaction import failure

logger = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]


class BackgroundExtractions:
    """Tracked background jobs of one memory manager, on the loop that created it."""

    def __init__(self, max_concurrent: int) -> None:
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        self.loop = asyncio.get_running_loop()
        self._semaphore = asyncio.Semaphore(max_concurrent)
        self._queues: dict[Hashable, deque[tuple[contextvars.Context, Job]]] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._pending = 0

    @property
    def pending(self) -> int:
        """Jobs submitted and not yet finished (queued or running)."""
        return self._pending

    def submit(self, key: Hashable, job: Job) -> None:
        """Schedule ``job`` after every earlier job of ``key``; returns at once."""
        entry = (contextvars.copy_context(), job)
        self._pending += 1
        queue = self._queues.get(key)
        if queue is not None:
            queue.append(entry)
            return
        self._queues[key] = deque([entry])
        worker = self.loop.create_task(self._work(key), name=f"tulip-memory-extract:{key}")
        self._workers.add(worker)
        worker.add_done_callback(self._workers.discard)

    async def drain(self) -> None:
        """Wait until no job is left, including jobs submitted meanwhile.

        ``asyncio.wait`` does not cancel what it waits for, so cancelling ``drain``
        leaves the jobs running.
        """
        while self._workers:
            await asyncio.wait(set(self._workers))

    async def _work(self, key: Hashable) -> None:
        queue = self._queues[key]
        try:
            while queue:
                context, job = queue[0]
                try:
                    async with self._semaphore:
                        await self.loop.create_task(_call(job), context=context)
                except Exception as e:
                    logger.error("background memory extraction for %r failed: %s", key, failure(e))
                finally:
                    queue.popleft()
                    self._pending -= 1
        finally:
            # No await between the last ``while queue`` check and here, so a job
            # submitted for this key either was seen above or finds no queue and
            # starts a new worker.
            if self._queues.get(key) is queue:
                del self._queues[key]


async def _call(job: Job) -> None:
    await job()

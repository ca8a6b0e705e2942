"""Run coroutines from synchronous code on one private event-loop thread.

The sync facades (stores, embedders) are generated from the async core through this
portal rather than written twice. A portal owns one loop for its whole life, so
loop-bound resources such as an asyncpg pool stay on the loop that created them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Portal:
    """A daemon thread running an event loop; :meth:`call` blocks on a coroutine."""

    def __init__(self, name: str = "tulip-portal") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the portal's loop and return its result."""
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("portal is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` run on the portal's loop, from another event loop (so what it
        binds to a loop, locks and pools, is bound to the portal's, whichever loop the
        caller is on)."""
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("portal is closed")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    def close(self) -> None:
        """Stop the loop and join the thread; idempotent."""
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


_shared: Portal | None = None
_shared_lock = threading.Lock()


def shared_portal() -> Portal:
    """The process-wide portal used by stateless sync helpers."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Portal("tulip-shared-portal")
        return _shared

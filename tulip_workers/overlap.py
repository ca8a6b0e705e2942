"""Two awaits at once, with the first one's errors as they are.

``asyncio.gather`` leaves the other awaitable running when one fails, and a
``TaskGroup`` raises an ``ExceptionGroup``: the event worker classifies the error an
attempt raised (unreachable, permanent, retried), so :func:`beside` raises it as it
came, and never leaves the other one running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

A = TypeVar("A")
B = TypeVar("B")


async def beside(first: Awaitable[A], second: Coroutine[Any, Any, B]) -> tuple[A, B]:
    """``first`` awaited while ``second`` runs as a task of its own; both results. When
    ``first`` fails (or this is cancelled) ``second`` is cancelled and waited for, and
    ``first``'s error raised; ``second``'s own error is raised once ``first`` is done."""
    task = asyncio.ensure_future(second)
    try:
        a = await first
    except BaseException:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    return a, await task

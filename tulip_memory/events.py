"""Observability hooks: named events and the subscribers that receive them.

Library code calls ``await emit(EV_..., field=value, ...)``; an application calls
``unsubscribe = subscribe(callback)`` to receive every event as ``callback(name,
fields)`` (a plain function or a coroutine function). A failing subscriber is logged
and never breaks the code that emitted.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

logger = logging.getLogger(__name__)

EV_MEMORY_MANAGER_INJECTED = "memory.manager.injected"
EV_MEMORY_MANAGER_EXTRACTED = "memory.manager.extracted"
EV_MEMORY_MANAGER_EXTRACT_FAILED = "memory.manager.extract_failed"
EV_MEMORY_CONVERSATION_PRUNED = "memory.conversation.pruned"
EV_MEMORY_COMPACTOR_TRIGGERED = "memory.compactor.triggered"
EV_MEMORY_COMPACTOR_COMPLETED = "memory.compactor.completed"
#: Ours, not the SDK's: one LLM extraction call finished (tokens, cost, dropped items).
EV_MEMORY_EXTRACTOR_COMPLETED = "memory.extractor.completed"

Subscriber = Callable[[str, Mapping[str, Any]], Awaitable[None] | None]

_subscribers: list[Subscriber] = []
_scheduled: set[asyncio.Task[None]] = set()


def subscribe(callback: Subscriber) -> Callable[[], None]:
    """Deliver every event to ``callback``; return a function that stops it (idempotent)."""
    _subscribers.append(callback)

    def unsubscribe() -> None:
        if callback in _subscribers:
            _subscribers.remove(callback)

    return unsubscribe


async def emit(name: str, **fields: Any) -> None:
    """Deliver event ``name`` to every subscriber, in subscription order."""
    view = MappingProxyType(fields)  # one subscriber cannot change what the next sees
    for callback in list(_subscribers):
        try:
            result = callback(name, view)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("event subscriber %r failed on %s", callback, name)


def emit_sync(name: str, **fields: Any) -> None:
    """:func:`emit` for synchronous call sites. A coroutine subscriber's delivery is
    scheduled on the running loop (or, with no loop running, skipped with a warning)."""
    view = MappingProxyType(fields)
    for callback in list(_subscribers):
        try:
            result = callback(name, view)
            if inspect.isawaitable(result):
                _schedule(result, callback, name)
        except Exception:
            logger.exception("event subscriber %r failed on %s", callback, name)


def _schedule(awaitable: Awaitable[None], callback: Subscriber, name: str) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        close = getattr(awaitable, "close", None)
        if close is not None:
            close()
        logger.warning("no running loop for async subscriber %r of %s; skipped", callback, name)
        return
    task = loop.create_task(_guarded(awaitable, callback, name))
    _scheduled.add(task)  # held until done, so the task is not garbage-collected
    task.add_done_callback(_scheduled.discard)


async def _guarded(awaitable: Awaitable[None], callback: Subscriber, name: str) -> None:
    try:
        await awaitable
    except Exception:
        logger.exception("event subscriber %r failed on %s", callback, name)

"""Which tenant the running event is for, so the shared caps it takes (the LLM
semaphore) can share themselves fairly across tenants (invariant 9).

The task body sets :data:`serving` inside the coroutine it runs (:func:`for_tenant`):
each asyncio task has its own copy of the context, so concurrent events on one event
loop each see their own tenant, and what they start inherits it."""

from __future__ import annotations

from collections.abc import Awaitable
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

#: The tenant whose event the current task runs (``None``: none known).
serving: ContextVar[str | None] = ContextVar("tulip_serving_tenant", default=None)


async def for_tenant(tenant: str | None, work: Awaitable[T]) -> T:
    """``work`` awaited with :data:`serving` set to ``tenant``."""
    serving.set(tenant)
    return await work

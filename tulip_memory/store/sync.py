"""``SyncStore``: the blocking facade for synchronous callers (Celery task bodies).

Generated from the async core: every coroutine method of :class:`BaseStore` is run
on one private event loop thread (a :class:`~tulip_memory._portal.Portal`) that the
wrapped store lives on, so loop-bound resources like an asyncpg pool stay valid.
Nothing is implemented twice.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from tulip_memory._portal import Portal
from tulip_memory.store.base import BaseStore
from tulip_memory.store.items import StoreCapabilities

_ASYNC_METHODS = frozenset(
    name
    for name, fn in inspect.getmembers(BaseStore, inspect.iscoroutinefunction)
    if not name.startswith("_")
)


class SyncStore:
    """Blocking view of a :class:`BaseStore`: ``SyncStore(store).put(ns, k, v)``.

    Method names, signatures and results are the async store's. ``close()`` closes
    the store and then the portal.
    """

    def __init__(self, store: BaseStore, *, timeout: float | None = None) -> None:
        self._store = store
        self._portal = Portal(f"sync-{type(store).__name__}")
        self._timeout = timeout

    @property
    def store(self) -> BaseStore:
        return self._store

    @property
    def capabilities(self) -> StoreCapabilities:
        return self._store.capabilities

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in _ASYNC_METHODS:
            raise AttributeError(f"SyncStore has no attribute {name!r}")
        method = getattr(self._store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._portal.call(method(*args, **kwargs), self._timeout)

        call.__name__ = name
        call.__doc__ = method.__doc__
        return call

    def close(self) -> None:
        try:
            self._portal.call(self._store.close(), self._timeout)
        finally:
            self._portal.close()

    def __enter__(self) -> SyncStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""The phases of a reindex job, and the public hook that watches them.

A :class:`PhaseObserver` passed to ``Reindexer(observer=...)`` is entered around each
phase this process runs (a batch that runs on a worker is that worker's): phases
nest (``start`` holds ``probe``, ``create``, ``index`` and ``plan``; ``batch`` holds
``rows``, ``embed``, ``write`` and ``pace``), so an observer that times them can tell a phase's
own time from its callees'. ``bench/reindex.py`` times them this way.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractContextManager
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

#: Each phase, and what it covers.
PHASES = {
    "start": "a job's start: job rows, lookups",
    "probe": "probe the new model (one embedding)",
    "create": "add the slot's columns and layout (under the layout lock)",
    "index": "build the slot's HNSW index",
    "plan": "cut the rows into ranges",
    "batch": "one range: job, range and pending bookkeeping",
    "rows": "read a range's rows",
    "embed": "embed a range's texts",
    "write": "write a range's vectors (UPDATE and range done)",
    "pace": "probe the database after a write, pause as the pacer asks (see reindex.pacing)",
    "finish": "the sweep and the switch",
}


class PhaseObserver(Protocol):
    def phase(self, name: str) -> AbstractContextManager[object]:
        """Entered when phase ``name`` (a key of :data:`PHASES`) begins, left when it ends."""
        ...


class Observed(Protocol):
    observer: PhaseObserver | None


P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", bound=Observed)


def phase(
    name: str,
) -> Callable[
    [Callable[Concatenate[S, P], Awaitable[R]]], Callable[Concatenate[S, P], Coroutine[Any, Any, R]]
]:
    """Run the decorated method as phase ``name`` of its object's observer."""
    if name not in PHASES:
        raise ValueError(f"not a reindex phase: {name!r}")

    def decorate(
        method: Callable[Concatenate[S, P], Awaitable[R]],
    ) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
        async def run(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            if self.observer is None:
                return await method(self, *args, **kwargs)
            with self.observer.phase(name):
                return await method(self, *args, **kwargs)

        functools.update_wrapper(run, method)
        return run

    return decorate

"""The table of checkpointer providers behind :mod:`tulip_memory.registry`.

A leaf: it names what a provider builds (:class:`BaseCheckpointer`) and holds the
factories by name, the built-in ones (which :mod:`tulip_memory.registry` registers) and
those other packages declare as entry points in the ``tulip_memory.checkpointers``
group, loaded on the first lookup that misses. A backend that wraps itself in another
provider (``S3Backend(queued=True)`` takes ``queued``) looks it up here, without the
registry and its built-in backends.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Protocol, runtime_checkable

from tulip_memory.errors import TulipMemoryError
from tulip_memory.state import AgentState

ENTRY_POINT_GROUP = "tulip_memory.checkpointers"


@runtime_checkable
class BaseCheckpointer(Protocol):
    """What every checkpointer does: per-thread state, saved and loaded by id."""

    async def save(
        self, state: AgentState, thread_id: str, checkpoint_id: str | None = None
    ) -> str: ...

    async def load(self, thread_id: str, checkpoint_id: str | None = None) -> AgentState | None: ...

    async def list_checkpoints(self, thread_id: str, limit: int = 10) -> list[str]: ...

    async def delete(self, thread_id: str, checkpoint_id: str | None = None) -> bool: ...


CheckpointerFactory = Callable[..., BaseCheckpointer]


class UnknownCheckpointerError(TulipMemoryError, ValueError):
    """A provider name no factory is registered for (a :class:`ValueError`, as the seed's)."""

    def __init__(self, provider: str, available: list[str]) -> None:
        self.provider = provider
        self.available = available
        super().__init__(
            f"Unknown checkpointer provider: '{provider}'. "
            f"Available providers: {available}. "
            f"Install optional dependencies or register a custom provider."
        )


#: Every registered factory by provider name.
PROVIDERS: dict[str, CheckpointerFactory] = {}


def _discover(provider: str) -> None:
    """Register ``provider`` from an installed entry point, if one declares it."""
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == provider and provider not in PROVIDERS:
            PROVIDERS[provider] = ep.load()


def factory(provider: str) -> CheckpointerFactory:
    """The factory registered (or declared as an entry point) for ``provider``."""
    if provider not in PROVIDERS:
        _discover(provider)
    if provider not in PROVIDERS:
        raise UnknownCheckpointerError(provider, list(PROVIDERS))
    return PROVIDERS[provider]


def register(name: str, made_by: CheckpointerFactory) -> None:
    """Register ``made_by`` as the factory of provider ``name``."""
    if not name or ":" in name:
        raise ValueError(f"provider name must be non-empty and without ':', got {name!r}")
    PROVIDERS[name] = made_by


def names() -> list[str]:
    """The registered provider names, then those only declared as entry points."""
    declared = [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)]
    return list(PROVIDERS) + [n for n in declared if n not in PROVIDERS]

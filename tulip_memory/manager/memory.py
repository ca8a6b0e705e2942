"""What a memory manager stores and where: ``Memory``, ``MemoryType``, ``MemoryScope``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tulip_memory.store.validation import validate_namespace

Namespace = tuple[str, ...]


class MemoryType(StrEnum):
    """Semantic category for a stored memory."""

    USER = "user"
    FEEDBACK = "feedback"
    PROJECT = "project"
    REFERENCE = "reference"


@dataclass(frozen=True)
class Memory:
    """A single durable memory entry.

    ``key`` is the fact's stable name within its type: saving the same ``(type, key)``
    again updates the record. ``metadata`` holds extra JSON fields (confidence, source,
    why, how_to_apply, ISO timestamps).
    """

    type: MemoryType
    key: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", MemoryType(self.type))

    def to_store_value(self) -> dict[str, Any]:
        """Serialise to a JSON-compatible dict for the store."""
        return {
            "type": self.type.value,
            "key": self.key,
            "content": self.content,
            "metadata": self.metadata,
        }

    @classmethod
    def from_store_value(cls, value: Mapping[str, Any]) -> Memory:
        """Deserialise from a store value dict."""
        return cls(
            type=MemoryType(value["type"]),
            key=value["key"],
            content=value["content"],
            metadata=dict(value.get("metadata") or {}),
        )


@dataclass(frozen=True)
class MemoryScope:
    """Where one run's memories live: written under ``namespace``; recalled from it and,
    read-only, from the ``recall`` prefixes (which must share its tenant, ``[0]``)."""

    namespace: Namespace
    recall: tuple[Namespace, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "namespace", validate_namespace(self.namespace))
        object.__setattr__(self, "recall", tuple(validate_namespace(p) for p in self.recall))


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """What a namespace resolver sees of a run: the metadata the application passed."""

    metadata: Mapping[str, Any] = field(default_factory=dict)
    thread_id: str | None = None


#: ``(run) -> prefix``: a namespace, a :class:`MemoryScope`, or ``None`` for no memory.
NamespaceResolver = Callable[[RunInfo], Sequence[str] | MemoryScope | None]

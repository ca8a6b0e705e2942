"""The records a store hands back: items, capabilities, search results."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass
class StoreItem:
    """An item stored in the store; ``version`` counts writes (1 on create)."""

    namespace: tuple[str, ...]
    key: str
    value: Any
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    version: int = 1

    def to_dict(self) -> dict[str, Any]:
        """Convert to a JSON-friendly dictionary."""
        return {
            "namespace": list(self.namespace),
            "key": self.key,
            "value": self.value,
            "metadata": self.metadata,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StoreItem:
        """Create from a dictionary made by :meth:`to_dict`."""
        return cls(
            namespace=tuple(d["namespace"]),
            key=d["key"],
            value=d["value"],
            metadata=d.get("metadata", {}),
            created_at=datetime.fromisoformat(d["created_at"]),
            updated_at=datetime.fromisoformat(d["updated_at"]),
            version=d.get("version", 1),
        )


@dataclass(frozen=True)
class StoreCapabilities:
    """What a store implementation supports; callers branch on it."""

    search: bool = False
    semantic_search: bool = False
    embedding_dimension: int | None = None
    ttl: bool = False
    list_namespaces: bool = False
    batch_operations: bool = False
    transactions: bool = False


@dataclass
class SemanticSearchResult:
    """One hit of a vector search: ``score`` in [0, 1], higher is more similar."""

    item: StoreItem
    score: float
    distance: float | None = None

"""The cross-thread store contract (``tulip.memory.store.BaseStore``).

Async, as in the SDK. Optional methods raise :class:`StoreCapabilityError`; backends
advertise what they support through :attr:`BaseStore.capabilities`. The defaults of
``exists``, ``get_item``, ``search_many``, ``put_batch``, ``get_batch`` and
``clear_namespace`` fall back to the required methods, exactly as the seed documents.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from tulip_memory.errors import StoreCapabilityError
from tulip_memory.store.items import SemanticSearchResult, StoreCapabilities, StoreItem
from tulip_memory.store.ranking import tenant_of
from tulip_memory.store.validation import validate_limit, validate_namespace, validate_query

BatchItem = tuple[tuple[str, ...], str, Any, dict[str, Any] | None]


class BaseStore(ABC):
    """Abstract base class for store implementations."""

    @property
    def capabilities(self) -> StoreCapabilities:
        """Return capabilities. Override in subclasses."""
        return StoreCapabilities()

    @abstractmethod
    async def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Any,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Store a value."""

    @abstractmethod
    async def get(self, namespace: tuple[str, ...], key: str) -> Any | None:
        """Retrieve a value."""

    @abstractmethod
    async def delete(self, namespace: tuple[str, ...], key: str) -> bool:
        """Delete a value."""

    @abstractmethod
    async def list_keys(self, namespace: tuple[str, ...], limit: int = 100) -> list[str]:
        """List keys in namespace."""

    async def exists(self, namespace: tuple[str, ...], key: str) -> bool:
        """Check if a key exists."""
        value = await self.get(namespace, key)
        return value is not None

    async def get_item(self, namespace: tuple[str, ...], key: str) -> StoreItem | None:
        """Get full item with metadata (default: built from :meth:`get`)."""
        value = await self.get(namespace, key)
        if value is None:
            return None
        now = datetime.now(UTC)
        return StoreItem(
            namespace=namespace, key=key, value=value, metadata={}, created_at=now, updated_at=now
        )

    async def search(
        self,
        namespace: tuple[str, ...],
        query: str | None = None,
        limit: int = 10,
    ) -> list[StoreItem]:
        """Search for items in namespace (optional: ``capabilities.search``)."""
        raise StoreCapabilityError(
            capability="search",
            store_class=type(self).__name__,
            hint=(
                "Choose a backend that advertises capabilities.search "
                "(e.g., InMemoryStore, OpenSearch, pgvector)."
            ),
        )

    async def search_many(
        self,
        namespaces: Sequence[tuple[str, ...]],
        query: str | None = None,
        limit: int = 10,
    ) -> list[list[StoreItem]]:
        """:meth:`search` over several namespaces at once, one list per namespace."""
        return [await self.search(ns, query=query, limit=limit) for ns in namespaces]

    async def put_with_embedding(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Any,
        embedding: list[float],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Store a value with its embedding (optional: ``capabilities.semantic_search``)."""
        raise StoreCapabilityError(
            capability="semantic_search",
            store_class=type(self).__name__,
            hint="Use put() for plain storage, or pick a vector-capable backend.",
        )

    async def search_by_embedding(
        self,
        namespace: tuple[str, ...],
        query_embedding: list[float],
        limit: int = 10,
        threshold: float | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> list[SemanticSearchResult]:
        """Search by vector similarity, highest first (optional)."""
        raise StoreCapabilityError(
            capability="semantic_search",
            store_class=type(self).__name__,
            hint="Pick a vector-capable backend (e.g., pgvector, Qdrant).",
        )

    async def get_embedding(self, namespace: tuple[str, ...], key: str) -> list[float] | None:
        """Get the embedding vector for a stored item (optional)."""
        raise StoreCapabilityError(capability="semantic_search", store_class=type(self).__name__)

    async def put_batch(self, items: list[BatchItem]) -> None:
        """Store multiple items; the default is sequential ``put()``, not atomic."""
        for namespace, key, value, metadata in items:
            await self.put(namespace, key, value, metadata)

    async def get_batch(
        self, keys: list[tuple[tuple[str, ...], str]]
    ) -> dict[tuple[tuple[str, ...], str], Any]:
        """Retrieve multiple items as ``{(namespace, key): value}``; missing keys left out."""
        results: dict[tuple[tuple[str, ...], str], Any] = {}
        for namespace, key in keys:
            value = await self.get(namespace, key)
            if value is not None:
                results[(namespace, key)] = value
        return results

    async def list_namespaces(
        self,
        prefix: tuple[str, ...] | None = None,
        limit: int = 100,
    ) -> list[tuple[str, ...]]:
        """List namespaces (optional: ``capabilities.list_namespaces``)."""
        raise StoreCapabilityError(capability="list_namespaces", store_class=type(self).__name__)

    async def clear_namespace(self, namespace: tuple[str, ...]) -> int:
        """Delete all items in a namespace; return how many were deleted."""
        keys = await self.list_keys(namespace, limit=10000)
        count = 0
        for key in keys:
            if await self.delete(namespace, key):
                count += 1
        return count

    async def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Close any resources."""


class BatchFirstStore(BaseStore):
    """A backend whose primitives are batches (one transaction, one statement, as
    LangGraph's batch-first stores): :meth:`put` is a batch of one and :meth:`search` a
    :meth:`search_many` of one, written once here, as is the check that a multi-namespace
    search stays within one tenant."""

    async def search(
        self,
        namespace: tuple[str, ...],
        query: str | None = None,
        limit: int = 10,
    ) -> list[StoreItem]:
        return (await self.search_many([namespace], query, limit))[0]

    async def search_many(
        self,
        namespaces: Sequence[tuple[str, ...]],
        query: str | None = None,
        limit: int = 10,
    ) -> list[list[StoreItem]]:
        """:meth:`search` over several namespaces of ONE tenant, in one read."""
        nss = [validate_namespace(ns) for ns in namespaces]
        query = validate_query(query)
        limit = validate_limit(limit)
        if not nss or not limit:
            return [[] for _ in nss]
        return await self._search_batch(tenant_of(nss, "search_many"), nss, query, limit)

    @abstractmethod
    async def _search_batch(
        self, tenant: str, namespaces: list[tuple[str, ...]], query: str | None, limit: int
    ) -> list[list[StoreItem]]:
        """Each of ``namespaces`` (validated, all of ``tenant``) searched, in order."""

    async def put(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Any,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        await self.put_batch([(namespace, key, value, metadata)])

    @abstractmethod
    async def put_batch(self, items: list[BatchItem]) -> None:
        """Store every item; a backend makes this atomic."""

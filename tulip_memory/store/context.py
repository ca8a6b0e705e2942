"""Scoped views of a store: ``NamespacedStore`` and the node-facing ``StoreContext``."""

from __future__ import annotations

from typing import Any

from tulip_memory.store.base import BaseStore
from tulip_memory.store.items import SemanticSearchResult, StoreItem


class NamespacedStore:
    """Store wrapper with a fixed namespace prefix."""

    def __init__(self, store: BaseStore, namespace: tuple[str, ...]) -> None:
        self._store = store
        self._namespace = namespace

    @property
    def namespace(self) -> tuple[str, ...]:
        return self._namespace

    @property
    def store(self) -> BaseStore:
        return self._store

    def scoped(self, *suffix: str) -> NamespacedStore:
        """Create new wrapper with extended namespace."""
        return NamespacedStore(self._store, (*self._namespace, *suffix))

    async def put(self, key: str, value: Any, metadata: dict[str, Any] | None = None) -> None:
        await self._store.put(self._namespace, key, value, metadata)

    async def get(self, key: str) -> Any | None:
        return await self._store.get(self._namespace, key)

    async def get_item(self, key: str) -> StoreItem | None:
        return await self._store.get_item(self._namespace, key)

    async def exists(self, key: str) -> bool:
        return await self._store.exists(self._namespace, key)

    async def delete(self, key: str) -> bool:
        return await self._store.delete(self._namespace, key)

    async def list_keys(self, limit: int = 100) -> list[str]:
        return await self._store.list_keys(self._namespace, limit)

    async def search(self, query: str | None = None, limit: int = 10) -> list[StoreItem]:
        return await self._store.search(self._namespace, query, limit)

    async def clear(self) -> int:
        return await self._store.clear_namespace(self._namespace)


class StoreContext:
    """Context object passed to nodes for store access."""

    def __init__(
        self, store: BaseStore, user_id: str | None = None, session_id: str | None = None
    ) -> None:
        self._store = store
        self._user_id = user_id
        self._session_id = session_id

    @property
    def store(self) -> BaseStore:
        """Access the underlying store."""
        return self._store

    def _memories(self) -> tuple[str, ...]:
        return ("users", self._user_id or "", "memories")

    def for_user(self, user_id: str | None = None) -> NamespacedStore:
        """Namespaced store for a user (the context's user when not given)."""
        uid = user_id or self._user_id
        if not uid:
            raise ValueError("user_id must be provided or set in context")
        return NamespacedStore(self._store, ("users", uid))

    def for_session(self, session_id: str | None = None) -> NamespacedStore:
        """Namespaced store for a session (the context's session when not given)."""
        sid = session_id or self._session_id
        if not sid:
            raise ValueError("session_id must be provided or set in context")
        return NamespacedStore(self._store, ("sessions", sid))

    async def get_user_memory(self, key: str) -> Any | None:
        """Get a memory for the current user."""
        if not self._user_id:
            return None
        return await self._store.get(self._memories(), key)

    async def remember(self, key: str, value: Any, metadata: dict[str, Any] | None = None) -> None:
        """Store a memory for the current user."""
        if not self._user_id:
            raise ValueError("No user_id set in store context")
        await self._store.put(self._memories(), key, value, metadata)

    async def forget(self, key: str) -> bool:
        """Delete a memory for the current user."""
        if not self._user_id:
            return False
        return await self._store.delete(self._memories(), key)

    async def search_memories(self, query: str, limit: int = 10) -> list[StoreItem]:
        """Search the current user's memories."""
        if not self._user_id:
            return []
        return await self._store.search(self._memories(), query, limit)

    async def remember_with_embedding(
        self,
        key: str,
        value: Any,
        embedding: list[float],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Store a memory with its embedding (needs ``capabilities.semantic_search``)."""
        if not self._user_id:
            raise ValueError("No user_id set in store context")
        await self._store.put_with_embedding(self._memories(), key, value, embedding, metadata)

    async def search_memories_semantic(
        self, query_embedding: list[float], limit: int = 10, threshold: float | None = None
    ) -> list[SemanticSearchResult]:
        """Search the current user's memories by vector similarity."""
        if not self._user_id:
            return []
        return await self._store.search_by_embedding(
            self._memories(), query_embedding, limit, threshold
        )

    async def get_global(self, key: str) -> Any | None:
        """Get a global value."""
        return await self._store.get(("global",), key)

    async def set_global(
        self, key: str, value: Any, metadata: dict[str, Any] | None = None
    ) -> None:
        """Set a global value."""
        await self._store.put(("global",), key, value, metadata)

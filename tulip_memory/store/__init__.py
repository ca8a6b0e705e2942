"""The cross-thread store (``tulip.memory.store``): contract and backends."""

from tulip_memory.errors import StoreCapabilityError
from tulip_memory.store.base import BaseStore
from tulip_memory.store.context import NamespacedStore, StoreContext
from tulip_memory.store.holographic import HolographicStore
from tulip_memory.store.items import SemanticSearchResult, StoreCapabilities, StoreItem
from tulip_memory.store.memory import InMemoryStore
from tulip_memory.store.postgres import PgMemory
from tulip_memory.store.sync import SyncStore

__all__ = [
    "BaseStore",
    "HolographicStore",
    "InMemoryStore",
    "NamespacedStore",
    "PgMemory",
    "SemanticSearchResult",
    "StoreCapabilities",
    "StoreCapabilityError",
    "StoreContext",
    "StoreItem",
    "SyncStore",
]

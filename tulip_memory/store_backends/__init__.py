"""``tulip.memory.store_backends``: the seed's module path of the durable stores.

The stores live in :mod:`tulip_memory.store`; :mod:`.holographic` and :mod:`.postgresql`
re-export them where the seed's source keeps them.
"""

from tulip_memory.store.holographic import HolographicStore
from tulip_memory.store.postgres import PgMemory

__all__ = ["HolographicStore", "PgMemory"]

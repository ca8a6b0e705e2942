"""``tulip.memory.store_backends.holographic``: :class:`HolographicStore`."""

from tulip_memory.store.holographic import HolographicStore

__all__ = ["HolographicStore"]

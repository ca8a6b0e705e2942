"""``tulip.memory.managers.mem0``: the manager of :mod:`tulip_memory.manager.mem0`."""

from tulip_memory.manager.mem0 import Mem0MemoryManager

__all__ = ["Mem0MemoryManager"]

"""Long-term memory managers (``tulip.memory.manager``)."""

from tulip_memory.manager.base import BaseMemoryManager, ExtractMode
from tulip_memory.manager.llm import ExtractFn, LLMMemoryManager
from tulip_memory.manager.mem0 import Mem0MemoryManager
from tulip_memory.manager.memory import (
    Memory,
    MemoryScope,
    MemoryType,
    NamespaceResolver,
    RunInfo,
)
from tulip_memory.manager.noop import NoopMemoryManager

__all__ = [
    "BaseMemoryManager",
    "ExtractFn",
    "ExtractMode",
    "LLMMemoryManager",
    "Mem0MemoryManager",
    "Memory",
    "MemoryScope",
    "MemoryType",
    "NamespaceResolver",
    "NoopMemoryManager",
    "RunInfo",
]

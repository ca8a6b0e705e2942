"""``NoopMemoryManager``: the memory wiring without any memory."""

from __future__ import annotations

from tulip_memory.manager.base import BaseMemoryManager
from tulip_memory.manager.memory import Memory
from tulip_memory.messages import Message


class NoopMemoryManager(BaseMemoryManager):
    """Pass-through memory manager: stores and retrieves nothing."""

    async def extract(self, messages: list[Message]) -> list[Memory]:
        return []

    async def retrieve(self, limit: int = 20) -> list[Memory]:
        return []

    async def save(self, memories: list[Memory]) -> None:
        return None

"""The extraction step of a worker: ``async (messages, existing) -> memories``.

``TULIP_EXTRACT_MODEL`` set: the LLM extractor through litellm, each model call
holding a slot of the cross-worker LLM semaphore; unset: the offline heuristic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from tulip_memory.extract import LLMExtractor, LLMExtractorConfig, heuristic_extract
from tulip_memory.manager import Memory
from tulip_memory.messages import Message


class Extractor(Protocol):
    async def __call__(
        self, messages: Sequence[Message], existing: Sequence[Memory]
    ) -> list[Memory]: ...


async def heuristic(messages: Sequence[Message], existing: Sequence[Memory]) -> list[Memory]:
    """The offline extractor; ``existing`` is not needed (keys are stable)."""
    return heuristic_extract(messages)


SlotFactory = Callable[[], AbstractAsyncContextManager[object]]


class LLMStep:
    """The LLM extractor, bounded by ``slot`` (a semaphore slot per model call)."""

    def __init__(self, config: LLMExtractorConfig, slot: SlotFactory | None = None) -> None:
        self._extractor = LLMExtractor(config)
        self._slot = slot

    async def __call__(
        self, messages: Sequence[Message], existing: Sequence[Memory]
    ) -> list[Memory]:
        if self._slot is None:
            result = await self._extractor.extract(messages, existing=existing)
        else:
            async with self._slot():
                result = await self._extractor.extract(messages, existing=existing)
        return list(result.memories)

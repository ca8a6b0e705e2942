"""``BaseMemoryManager``: the session lifecycle every long-term memory manager shares.

Subclasses decide what to extract, how to retrieve and how to save; this class injects
recalled memories at session start and runs extraction at session end, inline or as a
tracked background job.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Hashable
from typing import Any, Literal

from tulip_memory.events import (
    EV_MEMORY_MANAGER_EXTRACT_FAILED,
    EV_MEMORY_MANAGER_EXTRACTED,
    EV_MEMORY_MANAGER_INJECTED,
    emit,
)
from tulip_memory.manager.background import BackgroundExtractions
from tulip_memory.manager.block import inject_memory_block, latest_user_text, strip_memory_blocks
from tulip_memory.manager.memory import Memory
from tulip_memory.messages import Message
from tulip_memory.redaction import failure
from tulip_memory.state import AgentState

logger = logging.getLogger(__name__)

ExtractMode = Literal["inline", "background"]


class BaseMemoryManager(ABC):
    """Abstract base for long-term memory managers.

    Subclasses implement :meth:`extract`, :meth:`retrieve` and :meth:`save`; the
    agent runtime calls :meth:`on_session_start` and :meth:`on_session_end`.
    """

    extract_mode: ExtractMode = "inline"
    max_concurrent_extractions: int = 4

    @abstractmethod
    async def extract(self, messages: list[Message]) -> list[Memory]:
        """Extract durable memories from a finished conversation (may be empty)."""

    @abstractmethod
    async def retrieve(self, limit: int = 20) -> list[Memory]:
        """Stored memories for injection at session start, most recently updated first."""

    @abstractmethod
    async def save(self, memories: list[Memory]) -> None:
        """Persist ``memories``, upserting by key (re-extracting a fact updates it)."""

    async def retrieve_relevant(self, query: str | None, limit: int | None = None) -> list[Memory]:
        """The memories most relevant to ``query``; this default ignores it and
        delegates to :meth:`retrieve` (``limit=None`` uses the manager's default)."""
        if limit is None:
            return await self.retrieve()
        return await self.retrieve(limit)

    @property
    def pending_extractions(self) -> int:
        """Background extractions scheduled or running, not yet finished."""
        bg: BackgroundExtractions | None = self.__dict__.get("_bg_extractions")
        return 0 if bg is None else bg.pending

    async def on_session_start(self, state: AgentState) -> AgentState:
        """Recall memories for the latest user message and inject them as one block,
        replacing a block an earlier turn injected; with no memories, drop that block."""
        memories = await self.retrieve_relevant(latest_user_text(state.messages))
        if not memories:
            return state.with_messages(strip_memory_blocks(state.messages))
        injected = state.with_messages(inject_memory_block(state.messages, memories))
        await emit(
            EV_MEMORY_MANAGER_INJECTED,
            memory_count=len(memories),
            types=[m.type.value for m in memories],
            **self._event_fields(),
        )
        return injected

    async def on_session_end(self, state: AgentState) -> None:
        """Extract memories from the finished session (injected block removed) and save
        them: before returning (``"inline"``) or as a background job (``"background"``).

        Failures are logged and emitted as ``memory.manager.extract_failed``, never raised.
        """
        messages = strip_memory_blocks(state.messages)
        if self.extract_mode == "background":
            self._background().submit(
                self._extraction_order_key(), lambda: self._extract_and_save(messages)
            )
            return
        await self._extract_and_save(messages)

    async def drain(self) -> None:
        """Wait for every scheduled background extraction (also those submitted while
        waiting). Job errors were already reported; cancelling this leaves jobs running."""
        bg: BackgroundExtractions | None = self.__dict__.get("_bg_extractions")
        if bg is not None:
            await bg.drain()

    def _extraction_order_key(self) -> Hashable:
        """Jobs with equal keys run one at a time, in order; one key for the base."""
        return None

    def _event_fields(self) -> dict[str, Any]:
        """Extra fields for this manager's events (e.g. the namespace)."""
        return {}

    def _background(self) -> BackgroundExtractions:
        bg: BackgroundExtractions | None = self.__dict__.get("_bg_extractions")
        if bg is None or bg.loop is not asyncio.get_running_loop():
            bg = BackgroundExtractions(self.max_concurrent_extractions)
            self.__dict__["_bg_extractions"] = bg
        return bg

    async def _extract_and_save(self, messages: list[Message]) -> None:
        fields = self._event_fields()
        try:
            memories = await self.extract(messages)
            if memories:
                await self.save(memories)
        except Exception as e:
            # The error's text may quote the model's output or the conversation: the log
            # line carries its redacted form; the in-process event keeps it for handlers.
            where = fields or "default namespace"
            logger.error("memory extraction failed (%s): %s", where, failure(e))
            await emit(
                EV_MEMORY_MANAGER_EXTRACT_FAILED, error=type(e).__name__, reason=str(e), **fields
            )
            return
        await emit(
            EV_MEMORY_MANAGER_EXTRACTED,
            memory_count=len(memories),
            types=[m.type.value for m in memories],
            **fields,
        )

"""``QueuedMemoryManager``: the SDK's memory-manager hooks over the pipeline.

At session start it recalls synchronously from Postgres and injects the memory
block exactly as :class:`~tulip_memory.manager.BaseMemoryManager` does; at session
end it publishes a ``session.ended`` event and returns at once; the workers extract
and store. :meth:`drain` waits until this manager's published events are applied.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

from tulip_memory.errors import TulipMemoryError
from tulip_memory.manager import BaseMemoryManager, Memory
from tulip_memory.manager.block import strip_memory_blocks
from tulip_memory.messages import Message
from tulip_memory.state import AgentState
from tulip_memory.store.validation import validate_namespace
from tulip_producer.reader import DONE_STATES, AsyncReader


class Publisher(Protocol):
    """What the manager needs of :class:`tulip_producer.AsyncProducer`."""

    async def session_ended(
        self,
        namespace: tuple[str, ...],
        thread_id: str,
        messages: list[Message],
        metadata: dict[str, Any] | None = None,
    ) -> str: ...


class QueuedMemoryManager(BaseMemoryManager):
    """Long-term memory through the event pipeline, for one namespace."""

    def __init__(
        self,
        producer: Publisher,
        reader: AsyncReader,
        namespace: tuple[str, ...],
        *,
        retrieve_limit: int = 20,
        thread_id: Callable[[AgentState], str] | None = None,
    ) -> None:
        self.producer = producer
        self.reader = reader
        self.namespace = validate_namespace(namespace)
        self.retrieve_limit = retrieve_limit
        self._thread_id = thread_id or _thread_from_metadata
        self._published: list[str] = []

    @property
    def published(self) -> list[str]:
        """Ids of the events this manager published, oldest first."""
        return list(self._published)

    async def extract(self, messages: list[Message]) -> list[Memory]:
        """Extraction runs in the workers; nothing is extracted in-process."""
        return []

    async def save(self, memories: list[Memory]) -> None:
        raise TulipMemoryError(
            "QueuedMemoryManager writes through the pipeline only: memories come from "
            "session.ended events applied in order by the workers"
        )

    async def retrieve(self, limit: int = 20) -> list[Memory]:
        return await self.reader.recall(self.namespace, None, limit)

    async def retrieve_relevant(self, query: str | None, limit: int | None = None) -> list[Memory]:
        return await self.reader.recall(self.namespace, query, limit or self.retrieve_limit)

    async def on_session_end(self, state: AgentState) -> None:
        """Publish the finished session (injected block removed); returns at once."""
        messages = strip_memory_blocks(state.messages)
        event_id = await self.producer.session_ended(
            self.namespace, self._thread_id(state), messages, dict(state.metadata)
        )
        self._published.append(event_id)

    async def drain(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 - spec API
        """Wait until a worker is done with every event this manager published
        (applied, superseded or dead);
        ``TimeoutError`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pending = list(self._published)
        while pending:
            statuses = [await self.reader.status(e, tenant=self.namespace[0]) for e in pending]
            pending = [s.event_id for s in statuses if s.state not in DONE_STATES]
            if not pending:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{len(pending)} published event(s) still pending")
            await asyncio.sleep(0.05)


def _thread_from_metadata(state: AgentState) -> str:
    thread = state.metadata.get("thread_id")
    return thread if isinstance(thread, str) and thread else "default"

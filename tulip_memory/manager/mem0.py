"""``Mem0MemoryManager``: long-term memory kept by mem0 rather than a ``BaseStore``.

mem0 (the ``mem0ai`` package, ``pip install 'tulip-memory[mem0]'``) extracts memories
itself when it is handed a conversation, and keeps them in its own vector store. The
package is imported only when a client has to be built from ``config`` (or the default
``AsyncMemory()``); a ``client`` passed in can be anything exposing async ``add`` /
``search`` / ``get_all``.

Both calling conventions of mem0's reads are spoken: ``search(query, user_id=...,
limit=n)`` (the seed's, mem0 before 2.0) and ``search(query, filters={"user_id": ...},
top_k=n)`` (mem0 2.x, which refuses the former), chosen from the method's signature.

Beyond the seed: a manager with no scope (``user_id``, ``agent_id``, ``run_id``) is
refused at construction, as its memories would pool every user together; and a mem0
failure at session end is logged (without the conversation's text) and emitted as
``memory.manager.extract_failed``, never raised, as for every other manager.

mem0 itself reports usage to PostHog unless ``MEM0_TELEMETRY=False`` is set in the
environment before it is first imported; this module does not change that for you.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

from tulip_memory.events import (
    EV_MEMORY_MANAGER_EXTRACT_FAILED,
    EV_MEMORY_MANAGER_EXTRACTED,
    emit,
)
from tulip_memory.manager.base import BaseMemoryManager
from tulip_memory.manager.block import strip_memory_blocks
from tulip_memory.manager.memory import Memory, MemoryType
from tulip_memory.messages import Message, Role

logger = logging.getLogger(__name__)

_INSTALL = "Mem0MemoryManager needs mem0: pip install 'tulip-memory[mem0]' (the mem0ai package)"


class Mem0MemoryManager(BaseMemoryManager):
    """Memory manager backed by mem0.

    Args:
        client: a mem0 async memory client (anything exposing async ``add`` /
            ``search`` / ``get_all``). When None, one is created lazily from ``config``.
        config: mem0 configuration passed to ``AsyncMemory.from_config``; with neither
            ``client`` nor ``config`` a default ``AsyncMemory()`` (OpenAI-backed).
        user_id / agent_id / run_id: mem0 scope identifiers; at least one is required.
        search_query: query used by :meth:`retrieve`; when None, retrieval lists the
            memories in scope with ``get_all`` instead of a similarity search.
        retrieve_limit: maximum memories returned by :meth:`retrieve`.
    """

    def __init__(
        self,
        *,
        client: Any = None,
        config: dict[str, Any] | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        search_query: str | None = None,
        retrieve_limit: int = 20,
    ) -> None:
        if not (user_id or agent_id or run_id):
            raise ValueError(
                "Mem0MemoryManager needs a scope: user_id, agent_id or run_id "
                "(without one every user's memories would be pooled together)"
            )
        self._client_override = client
        self._config = config
        self.user_id = user_id
        self.agent_id = agent_id
        self.run_id = run_id
        self.search_query = search_query
        self.retrieve_limit = retrieve_limit
        self._client: Any = None

    def _get_client(self) -> Any:
        if self._client_override is not None:
            return self._client_override
        if self._client is None:
            try:
                from mem0 import AsyncMemory
            except ImportError as e:
                raise ImportError(_INSTALL) from e
            if self._config is not None:
                self._client = AsyncMemory.from_config(self._config)
            else:
                self._client = AsyncMemory()
        return self._client

    def _scope(self) -> dict[str, str]:
        ids = {"user_id": self.user_id, "agent_id": self.agent_id, "run_id": self.run_id}
        return {k: v for k, v in ids.items() if v}

    async def _scoped_read(self, fn: Callable[..., Any], *args: Any, limit: int) -> Any:
        """``fn`` in the caller's scope, in whichever convention ``fn`` speaks."""
        if _takes(fn, "top_k"):
            return await fn(*args, filters=self._scope(), top_k=limit)
        return await fn(*args, **self._scope(), limit=limit)

    async def extract(self, messages: list[Message]) -> list[Memory]:
        """mem0 extracts internally during ``add``; see :meth:`on_session_end`."""
        return []

    async def retrieve(self, limit: int = 20) -> list[Memory]:
        """In-scope memories from mem0 for injection."""
        top = min(limit, self.retrieve_limit)
        if top <= 0:
            return []
        client = self._get_client()
        if self.search_query:
            response = await self._scoped_read(client.search, self.search_query, limit=top)
        else:
            response = await self._scoped_read(client.get_all, limit=top)
        memories: list[Memory] = []
        for row in _result_rows(response)[:top]:
            text = row.get("memory") or row.get("text") or ""
            if not isinstance(text, str) or not text:
                continue
            metadata = {k: v for k, v in row.items() if k not in ("memory", "text")}
            memories.append(
                Memory(
                    type=MemoryType.REFERENCE,
                    key=str(row.get("id", text[:48])),
                    content=text,
                    metadata=metadata,
                )
            )
        return memories

    async def save(self, memories: list[Memory]) -> None:
        """Persist explicit memories to mem0 (direct ``save`` calls)."""
        if not memories:
            return
        client = self._get_client()
        for memory in memories:
            await client.add(memory.content, metadata=memory.metadata or None, **self._scope())

    async def on_session_end(self, state: Any) -> None:
        """Hand the finished conversation to mem0 for extraction and storage."""
        mem0_messages = _to_mem0_messages(list(state.messages))
        if not mem0_messages:
            return
        try:
            await self._get_client().add(mem0_messages, **self._scope())
        except Exception as e:
            # The error names its type only: mem0's messages may quote the conversation.
            logger.warning("mem0 add failed: %s", type(e).__name__)
            await emit(EV_MEMORY_MANAGER_EXTRACT_FAILED, backend="mem0", error=type(e).__name__)
            return
        await emit(EV_MEMORY_MANAGER_EXTRACTED, backend="mem0", message_count=len(mem0_messages))


def _to_mem0_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """The user and assistant turns with text, as mem0 takes them (the injected memory
    block, system prompts and tool traffic are not the user's words)."""
    out: list[dict[str, str]] = []
    for message in strip_memory_blocks(messages):
        if message.role in (Role.USER, Role.ASSISTANT) and message.content.strip():
            out.append({"role": message.role.value, "content": message.content})
    return out


def _result_rows(response: Any) -> list[dict[str, Any]]:
    """mem0's answer as rows: ``{"results": [...]}`` (mem0 >= 1.1) or a bare list."""
    rows = response.get("results", []) if isinstance(response, dict) else response
    if not isinstance(rows, list):
        return []
    return [r for r in rows if isinstance(r, dict)]


def _takes(fn: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False

"""``Mem0MemoryManager`` with in-process stand-ins for mem0's client: one speaking the
seed's convention (ids as keywords, ``limit``), one speaking mem0 2.x (``filters``,
``top_k``, top-level ids refused). Both keep real state, so what is added is found."""

from __future__ import annotations

import importlib.util
import itertools
import logging
import re
import subprocess
import sys
from typing import Any

import pytest

from tests.support.events import recording
from tulip_memory.manager import Mem0MemoryManager, Memory, MemoryType
from tulip_memory.manager.block import is_memory_block
from tulip_memory.messages import Message, Role, ToolCall
from tulip_memory.state import AgentState

_ids = itertools.count(1)


class SeedClient:
    """mem0 before 2.0: ``add(messages, user_id=...)``, ``search(query, user_id=..., limit=)``."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def _keep(self, content: str, scope: dict[str, Any], metadata: dict[str, Any] | None) -> None:
        row = {"id": f"m{next(_ids)}", "memory": content, "metadata": metadata, **scope}
        self.rows.append(row)

    async def add(
        self,
        messages: str | list[dict[str, str]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        scope = {
            k: v for k, v in (("user_id", user_id), ("agent_id", agent_id), ("run_id", run_id)) if v
        }
        self.calls.append(("add", {"messages": messages, **scope}))
        if isinstance(messages, str):
            self._keep(messages, scope, metadata)
        else:  # "extraction": every user turn becomes a memory
            for m in messages:
                if m["role"] == "user":
                    self._keep(f"User said: {m['content']}", scope, metadata)
        return {"results": []}

    def _in(self, scope: dict[str, Any]) -> list[dict[str, Any]]:
        return [r for r in self.rows if all(r.get(k) == v for k, v in scope.items())]

    async def search(
        self, query: str, *, user_id: str | None = None, limit: int = 100, **ids: Any
    ) -> dict[str, Any]:
        scope = {"user_id": user_id, **ids} if user_id else ids
        self.calls.append(("search", {"query": query, "limit": limit, **scope}))
        words = set(re.findall(r"\w+", query.lower()))
        hits = [r for r in self._in(scope) if words & set(re.findall(r"\w+", r["memory"].lower()))]
        return {"results": [{**r, "score": 0.9} for r in hits][:limit]}

    async def get_all(
        self, *, user_id: str | None = None, limit: int = 100, **ids: Any
    ) -> list[dict[str, Any]]:
        scope = {"user_id": user_id, **ids} if user_id else ids
        self.calls.append(("get_all", {"limit": limit, **scope}))
        return self._in(scope)[:limit]  # the pre-1.1 bare list


class V2Client(SeedClient):
    """mem0 2.x reads: ``filters=`` and ``top_k=``; top-level ids are refused."""

    async def search(
        self,
        query: str,
        *,
        top_k: int = 20,
        filters: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        if kwargs:
            raise ValueError(f"top-level entity parameters {sorted(kwargs)} are not supported")
        return await SeedClient.search(self, query, limit=top_k, **(filters or {}))

    async def get_all(  # type: ignore[override]
        self, *, filters: dict[str, Any] | None = None, top_k: int = 20, **kwargs: Any
    ) -> dict[str, Any]:
        if kwargs:
            raise ValueError(f"top-level entity parameters {sorted(kwargs)} are not supported")
        return {"results": await SeedClient.get_all(self, limit=top_k, **(filters or {}))}


def conversation() -> AgentState:
    return AgentState(
        messages=[
            Message(role=Role.SYSTEM, content="You are a travel agent."),
            Message(role=Role.USER, content="I only fly with window seats."),
            Message(
                role=Role.ASSISTANT,
                content="Noted.",
                tool_calls=(ToolCall(id="c1", name="search", arguments={"q": "flights"}),),
            ),
            Message(role=Role.TOOL, content="3 flights", tool_call_id="c1"),
            Message(role=Role.USER, content="  "),
            Message(role=Role.USER, content="I am vegetarian."),
        ]
    )


def test_the_seed_signature() -> None:
    manager = Mem0MemoryManager(user_id="u1")
    assert (manager.retrieve_limit, manager.search_query) == (20, None)
    assert (manager.agent_id, manager.run_id) == (None, None)
    with pytest.raises(ValueError, match="needs a scope"):
        Mem0MemoryManager(client=SeedClient())


@pytest.mark.parametrize("client_class", [SeedClient, V2Client])
async def test_session_end_hands_the_conversation_to_mem0(
    client_class: type[SeedClient],
) -> None:
    client = client_class()
    manager = Mem0MemoryManager(client=client, user_id="u1", agent_id="travel")
    with recording() as log:
        await manager.on_session_end(conversation())
    added = client.calls[0]
    assert added == (
        "add",
        {
            "messages": [
                {"role": "user", "content": "I only fly with window seats."},
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": "I am vegetarian."},
            ],
            "user_id": "u1",
            "agent_id": "travel",
        },
    )
    assert log.named("memory.manager.extracted") == [{"backend": "mem0", "message_count": 3}]
    assert await manager.extract(list(conversation().messages)) == []


@pytest.mark.parametrize("client_class", [SeedClient, V2Client])
async def test_retrieve_lists_or_searches_in_scope(client_class: type[SeedClient]) -> None:
    client = client_class()
    mine = Mem0MemoryManager(client=client, user_id="u1")
    theirs = Mem0MemoryManager(client=client, user_id="u2")
    await mine.on_session_end(conversation())
    await theirs.save([Memory(type=MemoryType.USER, key="k", content="Eats meat daily.")])
    listed = await mine.retrieve()
    assert [m.content for m in listed] == [
        "User said: I only fly with window seats.",
        "User said: I am vegetarian.",
    ]
    assert all(m.type == MemoryType.REFERENCE for m in listed)
    assert listed[0].key.startswith("m") and listed[0].metadata["user_id"] == "u1"
    assert "memory" not in listed[0].metadata
    assert len(await mine.retrieve(limit=1)) == 1
    searching = Mem0MemoryManager(
        client=client, user_id="u1", search_query="vegetarian food", retrieve_limit=5
    )
    found = await searching.retrieve(limit=50)
    assert [m.content for m in found] == ["User said: I am vegetarian."]
    assert client.calls[-1][1]["limit"] == 5  # min(limit, retrieve_limit)
    assert [m.content for m in await theirs.retrieve()] == ["Eats meat daily."]


async def test_session_start_injects_the_memories_once() -> None:
    client = SeedClient()
    manager = Mem0MemoryManager(client=client, user_id="u1")
    await manager.save([Memory(type=MemoryType.USER, key="seat", content="Window seats only.")])
    assert client.calls[0] == ("add", {"messages": "Window seats only.", "user_id": "u1"})
    state = AgentState(messages=[Message(role=Role.USER, content="Book me a flight.")])
    with recording() as log:
        injected = await manager.on_session_start(state)
        again = await manager.on_session_start(injected)
    blocks = [m for m in again.messages if is_memory_block(m)]
    assert len(blocks) == 1 and "Window seats only." in blocks[0].content
    assert log.named("memory.manager.injected")[0]["memory_count"] == 1


async def test_a_failing_mem0_never_fails_the_turn_nor_logs_the_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Down(SeedClient):
        async def add(self, messages: Any, **kwargs: Any) -> dict[str, Any]:
            raise ConnectionError(f"cannot store {messages!r}")

    manager = Mem0MemoryManager(client=Down(), user_id="u1")
    with recording() as log, caplog.at_level(logging.DEBUG):
        await manager.on_session_end(conversation())
    assert log.named("memory.manager.extract_failed") == [
        {"backend": "mem0", "error": "ConnectionError"}
    ]
    assert "vegetarian" not in caplog.text


@pytest.mark.skipif(importlib.util.find_spec("mem0") is not None, reason="mem0 is installed")
async def test_without_mem0_the_error_says_what_to_install_at_first_use() -> None:
    manager = Mem0MemoryManager(user_id="u1", config={"vector_store": {"provider": "qdrant"}})
    with pytest.raises(ImportError, match=r"tulip-memory\[mem0\]"):
        await manager.retrieve()


def test_importing_the_library_does_not_import_mem0() -> None:
    code = (
        "import sys, tulip_memory.manager, tulip_memory.managers.mem0; "
        "assert 'mem0' not in sys.modules, 'mem0 imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

"""``Mem0MemoryManager`` on the real mem0 library, where the ``mem0`` extra is installed
(``pip install -e '.[mem0]'``): the client is built lazily from ``config``, mem0 2.x's
``filters`` / ``top_k`` reads are used, scopes stay apart. mem0's model and embedder are
the local OpenAI-compatible server, its vector store a local Qdrant directory."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.openai_server import FakeOpenAI, Reply
from tulip_memory.manager import Mem0MemoryManager
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState

# mem0 reads MEM0_TELEMETRY once, at import (which importorskip does at collection).
os.environ.setdefault("MEM0_TELEMETRY", "False")
pytest.importorskip("mem0")


def facts(request: dict[str, Any]) -> Reply:
    """mem0's extraction call: one memory per preference the conversation states."""
    prompt = json.dumps(request["messages"])
    found = [t for t in ("vegetarian", "window seats") if t in prompt]
    return Reply(content=json.dumps({"memory": [{"text": f"User prefers {t}"} for t in found]}))


async def test_the_real_library(
    fake_openai: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEM0_DIR", str(tmp_path / "mem0"))
    fake_openai.default_chat = facts
    local = {"api_key": "test", "openai_base_url": fake_openai.url}
    config = {
        "llm": {"provider": "openai", "config": {"model": "gpt-4o-mini", **local}},
        "embedder": {
            "provider": "openai",
            "config": {"model": "text-embedding-3-small", "embedding_dims": 64, **local},
        },
        "vector_store": {
            "provider": "qdrant",
            "config": {"path": str(tmp_path / "q"), "embedding_model_dims": 64},
        },
        "history_db_path": str(tmp_path / "history.db"),
    }
    manager = Mem0MemoryManager(config=config, user_id="u1")
    await manager.on_session_end(
        AgentState(
            messages=[
                Message(role=Role.USER, content="I am vegetarian."),
                Message(role=Role.ASSISTANT, content="Noted."),
                Message(role=Role.USER, content="And I want window seats."),
            ]
        )
    )
    client = manager._get_client()
    assert sorted(m.content for m in await manager.retrieve()) == [
        "User prefers vegetarian",
        "User prefers window seats",
    ]
    searching = Mem0MemoryManager(client=client, user_id="u1", search_query="vegetarian")
    assert [m.content for m in await searching.retrieve()] == ["User prefers vegetarian"]
    assert await Mem0MemoryManager(client=client, user_id="u2").retrieve() == []

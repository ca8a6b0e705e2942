"""The seed documents' own examples, run through the seed paths (``tulip.memory.X`` ->
``tulip_memory.X``): the stores' wrappers, the memory manager, the registry, the turn
store of ``core.memory``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tulip_memory.delta import DeltaCheckpointer
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.manager import LLMMemoryManager, Memory, MemoryType
from tulip_memory.messages import Message, Role
from tulip_memory.registry import (
    BaseCheckpointer,
    get_checkpointer,
    list_checkpointers,
    register_checkpointer,
)
from tulip_memory.state import AgentState
from tulip_memory.store import InMemoryStore, NamespacedStore, StoreContext
from tulip_memory.turns import Memory as TurnMemory
from tulip_memory.turns import TurnVectorStore, cosine_similarity, load_store, persist_store


async def test_namespaced_store_example() -> None:
    store = InMemoryStore()
    user_store = NamespacedStore(store, ("users", "u42"))
    await user_store.put("preferences", {"theme": "dark"})
    assert await user_store.get("preferences") == {"theme": "dark"}
    assert await store.get(("users", "u42"), "preferences") == {"theme": "dark"}
    deeper = user_store.scoped("memories")
    await deeper.put("k", "v")
    assert await store.get(("users", "u42", "memories"), "k") == "v"


async def test_store_context_example() -> None:
    store = InMemoryStore()
    context = StoreContext(store, user_id="u42", session_id="s1")
    await context.remember("discussed_topic", {"topic": "python", "timestamp": 1})
    assert await context.get_user_memory("discussed_topic") == {"topic": "python", "timestamp": 1}
    assert [i.key for i in await context.search_memories("python")] == ["discussed_topic"]
    assert await context.search_memories("rust") == []
    dim = store.capabilities.embedding_dimension
    assert dim is not None
    embedding = [1.0] + [0.0] * (dim - 1)
    await context.remember_with_embedding("theme_pref", {"theme": "dark"}, embedding=embedding)
    hits = await context.search_memories_semantic(embedding, limit=1)
    assert hits[0].item.key == "theme_pref" and hits[0].score == pytest.approx(1.0)
    assert await context.forget("discussed_topic") is True
    await context.for_session().put("draft", "x")
    assert await store.get(("sessions", "s1"), "draft") == "x"
    with pytest.raises(ValueError, match="user_id"):
        StoreContext(store).for_user()
    assert await StoreContext(store).get_user_memory("anything") is None


async def test_llm_memory_manager_example() -> None:
    async def my_llm_extractor(messages: list[Message]) -> list[Memory]:
        said = [m.content for m in messages if m.role == Role.USER]
        return [Memory(type=MemoryType.USER, key="said", content=" / ".join(said))]

    manager = LLMMemoryManager(
        store=InMemoryStore(),
        extract_fn=my_llm_extractor,
        namespace_prefix=("users", "u42"),
    )
    await manager.on_session_end(
        AgentState(messages=[Message(role=Role.USER, content="I drink green tea.")])
    )
    started = await manager.on_session_start(
        AgentState(messages=[Message(role=Role.USER, content="What do I drink?")])
    )
    assert any("I drink green tea." in m.content for m in started.messages)


async def test_registry_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(get_checkpointer("memory"), DeltaCheckpointer)
    monkeypatch.chdir(tmp_path)
    file_cp = get_checkpointer("file:./checkpoints")
    await file_cp.save(AgentState(iterations=3), "t")
    loaded = await file_cp.load("t")
    assert loaded is not None and loaded.iterations == 3
    assert (tmp_path / "checkpoints").is_dir()

    def my_factory(**kwargs: Any) -> BaseCheckpointer:
        return DeltaCheckpointer()

    register_checkpointer("custom", my_factory)
    assert "custom" in list_checkpointers()
    assert isinstance(get_checkpointer("custom"), DeltaCheckpointer)
    with pytest.raises(ValueError, match="Unknown checkpointer provider: 'nosuch'"):
        get_checkpointer("nosuch:x")


def test_turn_memory_index_search_reindex_and_parquet(tmp_path: Path) -> None:
    memory = TurnMemory(HashingEmbedder(64))
    turn = {
        "role": "assistant",
        "content": [{"type": "text", "text": "The refund on ord-4821 is eligible."}],
        "timestamp": 1.0,
        "metadata": {},
    }
    assert memory.index_turn(turn) == 0
    other = {**turn, "content": [{"type": "text", "text": "Deploy window is Friday."}]}
    memory.index_turn_text("when do we deploy?\nDeploy window is Friday.", other, {"k": 1})
    hits = memory.search("refund ord-4821", top_k=1)
    assert hits[0].turn_index == 0 and hits[0].turn == turn and hits[0].metadata == {}
    assert memory.count() == 2
    memory.reindex(HashingEmbedder(32))
    assert memory.search("deploy friday", top_k=1)[0].metadata == {"k": 1}
    path = str(tmp_path / "sub" / "turns.parquet")
    persist_store(memory.store, path)
    loaded = load_store(path)
    assert [e.text for e in loaded.iter_entries()] == [e.text for e in memory.store.iter_entries()]
    memory.clear()
    assert memory.count() == 0 and TurnVectorStore().count() == 0
    assert cosine_similarity([0.0, 0.0], [1.0, 0.0]) == 0.0
    assert cosine_similarity([1.0, 0.0], [1.0, 0.0]) == pytest.approx(1.0)
    with pytest.raises(FileNotFoundError):
        load_store(str(tmp_path / "missing.parquet"))

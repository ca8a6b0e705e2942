"""``HolographicStore`` as the zero-infrastructure backend of ``LLMMemoryManager``."""

from __future__ import annotations

from pathlib import Path

from tulip_memory.manager import LLMMemoryManager, Memory, MemoryType
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_memory.store.holographic import HolographicStore

PREFIX = ("acme", "u1")


def session(*texts: str) -> AgentState:
    messages = [Message(role=Role.SYSTEM, content="You are helpful.")]
    for text in texts:
        messages += [
            Message(role=Role.USER, content=text),
            Message(role=Role.ASSISTANT, content="Noted."),
        ]
    return AgentState(messages=messages)


async def test_memories_round_trip_through_a_file_and_survive_a_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "memories.db")
    saved = [
        Memory(type=MemoryType.USER, key="city", content="The user lives in Lisbon."),
        Memory(type=MemoryType.USER, key="pet", content="The user has a dog called Rex."),
        Memory(type=MemoryType.USER, key="colour", content="Their favourite colour is green."),
        Memory(type=MemoryType.PROJECT, key="deadline", content="The launch is on Friday."),
        Memory(type=MemoryType.FEEDBACK, key="tone", content="Keep answers short."),
    ]
    store = HolographicStore(path)
    await LLMMemoryManager(store, namespace_prefix=PREFIX).save(saved)
    await store.close()

    reopened = HolographicStore(path)
    try:
        manager = LLMMemoryManager(reopened, namespace_prefix=PREFIX)
        got = await manager.retrieve(query="Where does the user live? In Lisbon?")
        assert sorted((m.type, m.key, m.content) for m in got) == sorted(
            (m.type, m.key, m.content) for m in saved
        )
        # The manager interleaves each type's ranking; the store ranks within a type.
        assert got[0].key == "city"
        assert (await manager.retrieve(query="what is the dog called"))[0].key == "pet"
        assert (await manager.retrieve(query="favourite colour"))[0].key == "colour"
        assert [m.key for m in await manager.retrieve(1)] == ["tone"]  # most recent
    finally:
        await reopened.close()


async def test_a_session_learns_and_the_next_process_recalls_it(tmp_path: Path) -> None:
    path = str(tmp_path / "memories.db")
    store = HolographicStore(path)
    await LLMMemoryManager(store, namespace_prefix=PREFIX).on_session_end(
        session("My favourite colour is green.", "I work as a nurse.")
    )
    await store.close()

    reopened = HolographicStore(path)
    try:
        manager = LLMMemoryManager(reopened, namespace_prefix=PREFIX)
        state = await manager.on_session_start(session("What colour should the logo be?"))
        injected = [m.content for m in state.messages if "green" in m.content]
        assert len(injected) == 1 and "nurse" in injected[0]
    finally:
        await reopened.close()

"""TulipSaver under a real StateGraph, and what LangGraph's suite does not check:
appended messages stored as deltas, writes that arrive late, tenants, other
processes writing the same thread, values only through the serializer."""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph

from tests.langgraph.conftest import SaverFactory
from tulip_memory.langgraph import TulipSaver
from tulip_memory.langgraph.threads import delta_thread


def reply(state: MessagesState) -> dict[str, list[AnyMessage]]:
    last = state["messages"][-1]
    return {"messages": [AIMessage(f"re: {last.content}", id=f"ai-{last.id}")]}


def chat(saver: TulipSaver) -> CompiledStateGraph[Any, Any, Any, Any]:
    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    return graph.compile(checkpointer=saver)


def turn(i: int) -> dict[str, list[AnyMessage]]:
    text = f"turn {i}: " + " ".join(f"word{(i * 7 + k) % 97}" for k in range(40))
    return {"messages": [HumanMessage(text, id=f"h-{i}")]}


async def stored_bytes(saver: TulipSaver, thread_id: str) -> int:
    stats = await saver.threads.get_storage_stats(delta_thread(thread_id, ""))
    return int(stats["stored_bytes"])


async def test_a_chat_resumes_from_storage_and_keeps_each_message_once(
    make_saver: SaverFactory,
) -> None:
    thread: RunnableConfig = {"configurable": {"thread_id": f"chat-{uuid.uuid4().hex[:6]}"}}
    saver = make_saver()
    app = chat(saver)
    turns = 60
    for i in range(turns):
        app.invoke(turn(i), thread)

    again = chat(make_saver())  # another process, nothing cached
    state = again.get_state(thread)
    messages = state.values["messages"]
    assert [m.id for m in messages] == [x for i in range(turns) for x in (f"h-{i}", f"ai-h-{i}")]
    assert messages[-1].content == f"re: {turn(turns - 1)['messages'][0].content}"
    history = list(again.get_state_history(thread))
    assert len(history) == 3 * turns  # input, __start__ and reply step per turn
    oldest_turn = [h for h in history if h.metadata and h.metadata["step"] == 1][-1]
    assert len(oldest_turn.values["messages"]) == 2

    # At rest: each message once in the history plus the head's latest state, not a
    # copy of the list per checkpoint (3 checkpoints per turn, ~turns/2 copies each).
    serde = JsonPlusSerializer()
    final = sum(len(serde.dumps_typed(m)[1]) for m in messages)
    at_rest = await stored_bytes(saver, thread["configurable"]["thread_id"])
    assert at_rest < final, (at_rest, final)


async def test_an_async_graph_and_a_sync_graph_share_a_thread(make_saver: SaverFactory) -> None:
    thread: RunnableConfig = {"configurable": {"thread_id": "mixed"}}
    saver = make_saver()
    app = chat(saver)
    await app.ainvoke(turn(0), thread)
    app.invoke(turn(1), thread)
    await app.ainvoke(turn(2), thread)
    messages = (await app.aget_state(thread)).values["messages"]
    assert [m.id for m in messages] == ["h-0", "ai-h-0", "h-1", "ai-h-1", "h-2", "ai-h-2"]


async def test_writes_that_arrive_after_the_next_checkpoint_reach_theirs(
    make_saver: SaverFactory,
) -> None:
    saver = make_saver()
    base: RunnableConfig = {"configurable": {"thread_id": "late", "checkpoint_ns": ""}}
    first = await saver.aput(base, _checkpoint("1", {"a": "x"}), {"step": 0}, {"a": 1})
    second = await saver.aput(first, _checkpoint("2", {"a": "y"}), {"step": 1}, {"a": 2})
    await saver.aput_writes(second, [("a", "for-2")], "task-2")
    await saver.aput_writes(first, [("a", "for-1"), ("b", "also-1")], "task-1")
    await saver.aput_writes(first, [("a", "for-1")], "task-1")  # a retry: kept once

    one = await saver.aget_tuple(first)
    two = await saver.aget_tuple(base)
    assert one is not None and two is not None
    assert one.pending_writes == [("task-1", "a", "for-1"), ("task-1", "b", "also-1")]
    assert one.checkpoint["channel_values"] == {"a": "x"}
    assert two.checkpoint["id"] == "2" and two.pending_writes == [("task-2", "a", "for-2")]
    assert two.checkpoint["channel_values"] == {"a": "y"}

    # Later still: checkpoints 3 and 4 saved, then one more write of checkpoint 1.
    third = await saver.aput(second, _checkpoint("3", {"a": "z"}), {"step": 2}, {"a": 3})
    await saver.aput(third, _checkpoint("4", {"a": "w"}), {"step": 3}, {"a": 4})
    await saver.aput_writes(first, [("c", "very-late")], "task-3")
    listed = {t.checkpoint["id"]: t for t in [t async for t in saver.alist(base)]}
    assert listed["1"].pending_writes == [
        ("task-1", "a", "for-1"),
        ("task-1", "b", "also-1"),
        ("task-3", "c", "very-late"),
    ]
    assert listed["2"].pending_writes == [("task-2", "a", "for-2")]
    assert listed["3"].pending_writes == listed["4"].pending_writes == []


async def test_writes_before_their_checkpoint_is_saved_are_kept(make_saver: SaverFactory) -> None:
    saver = make_saver()
    config: RunnableConfig = {
        "configurable": {"thread_id": "early", "checkpoint_ns": "", "checkpoint_id": "1"}
    }
    await saver.aput_writes(config, [("a", "early")], "task")
    assert await saver.aget_tuple(config) is None
    base: RunnableConfig = {"configurable": {"thread_id": "early", "checkpoint_ns": ""}}
    await saver.aput(base, _checkpoint("1", {}), {"step": 0}, {})
    found = await saver.aget_tuple(config)
    assert found is not None and found.pending_writes == [("task", "a", "early")]


async def test_tenants_never_see_each_others_threads(make_saver: SaverFactory) -> None:
    acme, globex = make_saver(tenant="acme"), make_saver(tenant="globex")
    base: RunnableConfig = {"configurable": {"thread_id": "shared-id", "checkpoint_ns": ""}}
    await acme.aput(base, _checkpoint("1", {"a": "acme's"}), {"run_id": "r"}, {"a": 1})
    assert await globex.aget_tuple(base) is None
    assert [t async for t in globex.alist(None)] == []
    await globex.aput(base, _checkpoint("1", {"a": "globex's"}), {"run_id": "r"}, {"a": 1})

    await globex.adelete_for_runs(["r"])
    await globex.adelete_thread("shared-id")
    found = await acme.aget_tuple(base)
    assert found is not None and found.checkpoint["channel_values"] == {"a": "acme's"}
    assert [t.config["configurable"]["thread_id"] async for t in acme.alist(None)] == ["shared-id"]


async def test_another_process_writing_the_thread_in_between_loses_nothing(
    make_saver: SaverFactory,
) -> None:
    one, two = make_saver(), make_saver()
    config: RunnableConfig = {"configurable": {"thread_id": "handoff", "checkpoint_ns": ""}}
    for i, saver in enumerate([one, two, one, two, one]):
        config = await saver.aput(config, _checkpoint(str(i), {"a": i}), {"step": i}, {"a": i})
        await saver.aput_writes(config, [("a", f"w{i}")], f"t{i}")
    for saver in (one, two):
        listed = [t async for t in saver.alist({"configurable": {"thread_id": "handoff"}})]
        assert [t.checkpoint["id"] for t in listed] == ["4", "3", "2", "1", "0"]
        assert [t.pending_writes for t in listed][-1] == [("t0", "a", "w0")]
        assert [t.checkpoint["channel_values"]["a"] for t in listed] == [4, 3, 2, 1, 0]


async def test_a_thread_deleted_by_another_process_is_found_again_once_saved(
    make_saver: SaverFactory,
) -> None:
    one, two = make_saver(), make_saver()
    base: RunnableConfig = {"configurable": {"thread_id": "again", "checkpoint_ns": "child:1"}}
    await one.aput(base, _checkpoint("1", {"a": 1}), {"run_id": "r"}, {"a": 1})
    await two.adelete_thread("again")
    await one.aput(base, _checkpoint("2", {"a": 2}), {"run_id": "r"}, {"a": 2})
    await two.adelete_for_runs(["r"])  # the run's markers were written again
    assert await one.aget_tuple(base) is None
    await one.aput(base, _checkpoint("3", {"a": 3}), {"run_id": "s"}, {"a": 3})
    await two.adelete_thread("again")  # so were the namespace's
    assert await one.aget_tuple(base) is None


async def test_deleting_the_last_run_keeps_the_writes_of_the_checkpoints_before(
    make_saver: SaverFactory,
) -> None:
    saver = make_saver()
    config: RunnableConfig = {"configurable": {"thread_id": "runs", "checkpoint_ns": ""}}
    for i, run in enumerate(["a", "a", "b", "b", "b"]):
        config = await saver.aput(config, _checkpoint(str(i), {"x": i}), {"run_id": run}, {"x": i})
        await saver.aput_writes(config, [("x", f"w{i}")], f"t{i}")
    await saver.adelete_for_runs(["b"])
    listed = [t async for t in saver.alist({"configurable": {"thread_id": "runs"}})]
    assert [(t.checkpoint["id"], t.pending_writes) for t in listed] == [
        ("1", [("t1", "x", "w1")]),
        ("0", [("t0", "x", "w0")]),
    ]
    latest = await saver.aget_tuple({"configurable": {"thread_id": "runs"}})
    assert latest is not None and latest.checkpoint["channel_values"] == {"x": 1}
    # and the thread goes on from there
    await saver.aput(latest.config, _checkpoint("9", {"x": 9}), {"run_id": "c"}, {"x": 9})
    again = await saver.aget_tuple(latest.config)
    assert again is not None and again.pending_writes == [("t1", "x", "w1")]


class Reversed(JsonPlusSerializer):
    """A serializer whose bytes are not the value's (as an encrypting one's are not)."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        kind, data = super().dumps_typed(obj)
        return kind, data[::-1]

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return super().loads_typed((data[0], data[1][::-1]))


async def test_values_and_writes_go_through_the_serializer(make_saver: SaverFactory) -> None:
    saver = make_saver(serde=Reversed())
    thread: RunnableConfig = {"configurable": {"thread_id": "serde"}}
    chat(saver).invoke({"messages": [HumanMessage("plain words here", id="h")]}, thread)
    newest = await saver.threads.load_data(delta_thread("serde", ""))
    assert newest is not None
    assert "plain words here" not in repr(newest)
    assert "ereh sdrow nialp" in repr(newest)  # the serializer's bytes, as Latin-1 text
    state = chat(make_saver(serde=Reversed())).get_state(thread)
    assert state.values["messages"][-1].content == "re: plain words here"


def _checkpoint(cid: str, values: dict[str, Any]) -> Any:
    return {
        "v": 4,
        "id": cid,
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": {k: 1 for k in values},
        "versions_seen": {},
        "updated_channels": None,
    }


async def test_a_latest_read_is_the_stored_head_and_the_callers_own(
    make_saver: SaverFactory,
) -> None:
    """The latest state comes from the writer's cache only while the stored head is the
    one it wrote; what a read returns can be changed in place (LangGraph does) without
    changing the next read."""
    one, two = make_saver(), make_saver()
    config: RunnableConfig = {"configurable": {"thread_id": "cached", "checkpoint_ns": ""}}
    config = await one.aput(config, _checkpoint("0", {"a": 0}), {"step": 0}, {"a": 0})
    first = await one.aget_tuple(config)
    assert first is not None
    first.checkpoint["channel_versions"]["a"] = 99
    first.metadata["step"] = 99
    again = await one.aget_tuple(config)
    assert again is not None
    assert again.checkpoint["channel_versions"]["a"] == 1 and again.metadata["step"] == 0

    await two.aput(config, _checkpoint("1", {"a": 1}), {"step": 1}, {"a": 1})
    latest = await one.aget_tuple({"configurable": {"thread_id": "cached"}})
    assert latest is not None and latest.checkpoint["channel_values"] == {"a": 1}

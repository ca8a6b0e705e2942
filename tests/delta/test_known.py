"""A save whose first messages are the objects the last save was made from encodes only
the rest, and still stores exactly what it was given: a change inside one of them (its
metadata or a tool call's arguments, the dicts a frozen message still lets a caller
change in place) is seen, down to a number's type."""

from __future__ import annotations

from typing import Any

from tulip_memory.delta import DeltaCheckpointer, DeltaStorage
from tulip_memory.delta import segments as seg
from tulip_memory.delta.codec import dumps, encode_state
from tulip_memory.delta.known import checkpoint_data, extend, known_count
from tulip_memory.messages import Message, Role, ToolCall
from tulip_memory.state import AgentState


def thread(n: int) -> list[AgentState]:
    """States sharing their message objects, as an agent loop appending makes them."""
    messages: list[Message] = []
    states = []
    for i in range(n):
        if i % 5 == 3:
            call = ToolCall(id=f"c{i}", name="lookup", arguments={"order": f"o{i}", "n": i})
            messages.append(Message(role=Role.ASSISTANT, tool_calls=[call]))
        meta: dict[str, Any] = {"turn": i} if i % 2 else {"said": f"s{i}"}
        messages.append(Message(role=Role.USER, content=f"turn {i} é", metadata=meta))
        states.append(AgentState(messages=messages, iterations=i, metadata={"i": i}))
    return states


def exact(state: AgentState | None) -> bytes:
    assert state is not None
    return dumps(state.to_checkpoint())


async def test_a_thread_saved_from_shared_messages_loads_every_checkpoint_exactly(
    storage: DeltaStorage,
) -> None:
    cp = DeltaCheckpointer(storage)
    states = thread(40)
    ids = [await cp.save(s, "t") for s in states]
    entry = cp.latest_cache.entry("t", (len(ids) - 1, ids[-1]), encode_state(
        states[-1].to_checkpoint()).digest)  # fmt: skip
    assert entry is not None and entry.known is not None
    assert len(entry.known.messages) == len(states[-1].messages)  # the next save appends
    for state, cid in zip(states, ids, strict=True):
        assert exact(await cp.load("t", cid)) == exact(state)


async def test_metadata_changed_in_place_is_saved(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage)
    first = Message(role=Role.USER, content="hi", metadata={"tag": "x"})
    await cp.save(AgentState(messages=[first]), "t")
    first.metadata["tag"] = "y"  # the frozen message's dict, changed in place
    first.metadata["new"] = "key"
    state = AgentState(messages=[first, Message(role=Role.ASSISTANT, content="yes")])
    await cp.save(state, "t")
    assert exact(await cp.load("t")) == exact(state)
    cp2 = DeltaCheckpointer(storage)  # from the store, not a cache
    assert exact(await cp2.load("t")) == exact(state)


async def test_a_number_changed_in_type_in_place_is_saved_to_its_bytes(
    storage: DeltaStorage,
) -> None:
    cp = DeltaCheckpointer(storage)
    first = Message(role=Role.USER, content="hi", metadata={"score": 1, "deep": [{"on": True}]})
    await cp.save(AgentState(messages=[first]), "t")
    first.metadata["score"] = 1.0  # == 1, other bytes
    first.metadata["deep"][0]["on"] = 1  # == True, other bytes
    state = AgentState(messages=[first, Message(role=Role.ASSISTANT, content="yes")])
    await cp.save(state, "t")
    loaded = await cp.load("t")
    assert exact(loaded) == exact(state)
    assert loaded is not None and type(loaded.messages[0].metadata["score"]) is float


async def test_tool_call_arguments_changed_in_place_are_saved(storage: DeltaStorage) -> None:
    cp = DeltaCheckpointer(storage)
    call = ToolCall(id="c1", name="refund", arguments={"order": "o-1"})
    first = Message(role=Role.ASSISTANT, tool_calls=[call])
    await cp.save(AgentState(messages=[first]), "t")
    call.arguments["order"] = "o-2"
    state = AgentState(messages=[first, Message(role=Role.TOOL, content="ok", tool_call_id="c1")])
    await cp.save(state, "t")
    assert exact(await cp.load("t")) == exact(state)


def test_known_messages_are_all_of_them_unchanged_or_none() -> None:
    states = thread(12)
    before, after = states[-2], states[-1]
    data = before.to_checkpoint()
    items = encode_state(data).data["messages"]
    known = extend(None, 0, before.messages, items)
    assert known_count(known, after.messages) == len(before.messages)
    made, count = checkpoint_data(after, known)
    assert count == {"messages": len(before.messages)}
    assert dumps(made) == dumps(after.to_checkpoint())
    copies = [Message.from_dict(m.to_dict()) for m in after.messages]  # equal, not the same
    assert known_count(known, copies) == 0
    assert known_count(known, before.messages[:-1]) == 0  # a truncated thread
    before.messages[1].metadata["turn"] = 1.0  # == 1: found by its bytes
    assert known_count(known, after.messages) == 0


def test_a_count_of_items_that_are_not_the_bases_own_is_not_trusted() -> None:
    states = thread(8)
    base = seg.encode(states[-2].to_checkpoint(), None, 6).latest
    data = states[-1].to_checkpoint()  # equal items, but not the base's objects
    data["messages"][0] = {**data["messages"][0], "content": "edited"}
    got = seg.encode(data, base, 6, {"messages": len(base.lists["messages"].items)})
    assert got.latest.raw == encode_state(data).raw  # encoded whole: the edit is kept

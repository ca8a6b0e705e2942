"""Property: any sequence of saves (appends, edits, truncations, field changes) and
deletes leaves every remaining checkpoint loading exactly as it was saved."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tulip_memory.delta import DeltaCheckpointer, InMemoryObjectStorage
from tulip_memory.messages import Message, Role, ToolCall
from tulip_memory.state import AgentState

json_leaf = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2) | st.text(max_size=4)
json_value = st.recursive(
    json_leaf,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=2), c, max_size=3),
    max_leaves=8,
)
texts = st.sampled_from(["hi", "ok", "tell me more", "the refund is eligible", ""])
roles = st.sampled_from([Role.USER, Role.ASSISTANT, Role.TOOL, Role.SYSTEM])


@st.composite
def messages(draw: st.DrawFn) -> Message:
    calls = draw(st.lists(st.builds(ToolCall, id=st.text(max_size=2), name=texts), max_size=1))
    meta = draw(st.dictionaries(st.text(max_size=2), json_leaf, max_size=2))
    return Message(role=draw(roles), content=draw(texts), tool_calls=calls, metadata=meta)


ops = st.one_of(
    st.tuples(st.just("append"), st.lists(messages(), min_size=1, max_size=3)),
    st.tuples(st.just("meta"), st.text(max_size=2), json_value),
    st.tuples(st.just("meta_del"), st.text(max_size=2)),
    st.tuples(st.just("tool"), st.text(max_size=2), json_value),
    st.tuples(st.just("iterate"), st.integers(0, 3)),
    st.tuples(st.just("truncate"), st.integers(0, 50)),
    st.tuples(st.just("edit"), st.integers(0, 50), messages()),
    st.tuples(st.just("remove"), st.integers(0, 50)),
    st.tuples(st.just("summarize"), texts),
    st.tuples(st.just("delete"), st.integers(0, 50)),
    st.tuples(st.just("resave"), st.integers(0, 50)),
)


def step(state: AgentState, op: tuple[Any, ...]) -> AgentState:
    msgs = list(state.messages)
    meta, tools, it = dict(state.metadata), dict(state.tool_executions), state.iterations
    kind = op[0]
    if kind == "append":
        msgs.extend(op[1])
    elif kind == "meta":
        meta[op[1]] = op[2]
    elif kind == "meta_del":
        meta.pop(op[1], None)
    elif kind == "tool":
        tools[op[1]] = op[2]
    elif kind == "iterate":
        it += op[1]
    elif kind == "truncate":
        msgs = msgs[: op[1] % (len(msgs) + 1)]
    elif kind == "edit" and msgs:
        msgs[op[1] % len(msgs)] = op[2]
    elif kind == "remove" and msgs:
        del msgs[op[1] % len(msgs)]
    elif kind == "summarize":
        msgs = [Message(role=Role.SYSTEM, content=f"summary: {op[1]}"), *msgs[-2:]]
    return AgentState(messages=msgs, tool_executions=tools, iterations=it, metadata=meta)


async def run(depth: int, sequence: list[tuple[Any, ...]]) -> None:
    cp = DeltaCheckpointer(InMemoryObjectStorage(), max_chain_depth=depth)
    saved: dict[str, AgentState] = {}
    order: list[str] = []
    state = AgentState()
    for n, op in enumerate(sequence):
        if op[0] == "delete" and order:
            victim = order.pop(op[1] % len(order))
            del saved[victim]
            assert await cp.delete("t", victim)
            continue
        if op[0] == "resave" and order:
            cid = order[op[1] % len(order)]
            order.remove(cid)
        else:
            state = step(state, op)
            cid = f"c{n}"
        await cp.save(state, "t", cid)
        saved[cid] = state
        order.append(cid)
    assert await cp.list_checkpoints("t", limit=1000) == order[::-1]
    for cid, expected in saved.items():
        assert await cp.load("t", cid) == expected, cid
    assert await cp.load("t") == (saved[order[-1]] if order else None)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.sampled_from([0, 1, 2, 5]), st.lists(ops, max_size=45))
def test_every_checkpoint_loads_as_saved(depth: int, sequence: list[tuple[Any, ...]]) -> None:
    asyncio.run(run(depth, sequence))

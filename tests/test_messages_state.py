"""Messages and agent state: exact JSON round trips (property-tested) and defaults."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tulip_memory.messages import Message, Role, ToolCall
from tulip_memory.state import AgentState, CheckpointFormatError

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=4)
tool_calls = st.builds(ToolCall, id=st.text(), name=st.text(), arguments=json_objects)
messages = st.builds(
    Message,
    role=st.sampled_from(Role),
    content=st.text(),
    tool_calls=st.lists(tool_calls, max_size=3),
    tool_call_id=st.none() | st.text(),
    name=st.none() | st.text(),
    metadata=json_objects,
)
states = st.builds(
    AgentState,
    messages=st.lists(messages, max_size=5),
    tool_executions=json_objects,
    iterations=st.integers(min_value=0, max_value=10_000),
    metadata=json_objects,
)


# The suite runs on a loaded 2-core host: generating a state may take longer than
# Hypothesis's defaults allow, which says nothing about the round trip.
under_load = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def through_json(data: Any) -> Any:
    return json.loads(json.dumps(data, allow_nan=False))


@under_load
@given(states)
def test_state_round_trips_exactly_through_json(state: AgentState) -> None:
    restored = AgentState.from_checkpoint(through_json(state.to_checkpoint()))
    assert restored == state
    assert restored.to_checkpoint() == state.to_checkpoint()


@under_load
@given(messages)
def test_message_round_trips_exactly_through_json(message: Message) -> None:
    assert Message.from_dict(through_json(message.to_dict())) == message


def test_message_defaults_and_normalisation() -> None:
    call = ToolCall(id="c1", name="lookup", arguments={"q": "x"})
    message = Message(role=Role.ASSISTANT, tool_calls=[call])
    assert message.tool_calls == (call,)
    assert message.content == "" and message.tool_call_id is None and message.metadata == {}
    assert Message.from_dict({"role": "user", "content": "hi"}) == Message(
        role=Role.USER, content="hi"
    )
    assert Message(role="tool", content="42", tool_call_id="c1").role is Role.TOOL  # type: ignore[arg-type]


def test_state_is_frozen_and_copies_with_new_messages() -> None:
    state = AgentState(messages=[Message(role=Role.USER, content="a")], iterations=2)
    newer = state.with_messages([*state.messages, Message(role=Role.ASSISTANT, content="b")])
    assert len(state.messages) == 1 and len(newer.messages) == 2
    assert newer.iterations == 2
    with pytest.raises(AttributeError):
        state.iterations = 3  # type: ignore[misc]


def test_unreadable_checkpoints_are_refused() -> None:
    with pytest.raises(CheckpointFormatError):
        AgentState.from_checkpoint({"version": 99, "messages": []})
    with pytest.raises(CheckpointFormatError):
        AgentState.from_checkpoint({"messages": [{"content": "no role"}]})
    with pytest.raises(CheckpointFormatError):
        AgentState.from_checkpoint({"messages": [{"role": "wizard"}]})


def test_a_loaded_message_shares_no_nested_value_with_what_it_was_read_from() -> None:
    """``from_dict`` / ``from_checkpoint`` copy nested dicts and lists, as deep as
    JSON nests them (900 levels parse; ``copy.deepcopy`` fails past ~500), and an
    application's own values too; scalars-only metadata is a plain copy."""
    deep = json.loads("[" * 900 + "]" * 900)
    data = AgentState(
        messages=(Message(role=Role.USER, content="x", metadata={"deep": deep, "n": 1}),),
        metadata={"tags": [{"n": 1}], "when": object()},
        tool_executions={"t": {"calls": [1]}},
    ).to_checkpoint()
    state = AgentState.from_checkpoint(data)
    assert state.messages[0].metadata == {"deep": deep, "n": 1}
    assert state.messages[0].metadata["deep"] is not deep
    assert state.metadata["tags"] is not data["metadata"]["tags"]
    assert state.metadata["when"] is not data["metadata"]["when"]  # deep-copied object
    assert state.tool_executions["t"]["calls"] is not data["tool_executions"]["t"]["calls"]
    call = ToolCall.from_dict({"id": "c", "name": "f", "arguments": {"a": [1]}})
    assert call.arguments == {"a": [1]}

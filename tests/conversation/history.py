"""Builders for message histories: chats, agent loops, tool traffic."""

from __future__ import annotations

from collections.abc import Sequence

from tulip_memory.messages import Message, Role, ToolCall

TASK = "Find the cheapest flight from Lisbon to Oslo on 12 May and book it under 200 EUR."


def system(text: str = "You are a travel agent.") -> Message:
    return Message(role=Role.SYSTEM, content=text)


def user(text: str) -> Message:
    return Message(role=Role.USER, content=text)


def bot(text: str) -> Message:
    return Message(role=Role.ASSISTANT, content=text)


def call(*ids: str, text: str = "") -> Message:
    """An assistant message calling ``search`` once per id."""
    calls = [ToolCall(id=i, name="search", arguments={"query": i}) for i in ids]
    return Message(role=Role.ASSISTANT, content=text, tool_calls=calls)


def result(call_id: str, text: str | None = None) -> Message:
    return Message(
        role=Role.TOOL, tool_call_id=call_id, name="search", content=text or f"result of {call_id}"
    )


def chat(count: int) -> list[Message]:
    """``count`` messages alternating user (``u0``, ``u1``...) and assistant (``a0``...)."""
    return [user(f"u{i // 2}") if i % 2 == 0 else bot(f"a{i // 2}") for i in range(count)]


def agent_loop(steps: int, task: str = TASK) -> list[Message]:
    """The task, then ``steps`` tool round-trips (``c0``/result ... ), no other user turn."""
    loop: list[Message] = [user(task)]
    for i in range(steps):
        loop += [call(f"c{i}"), result(f"c{i}")]
    return loop


def texts(messages: Sequence[Message]) -> list[str]:
    """What each message says, or ``call:<ids>`` / ``result:<id>`` for tool traffic."""
    shown: list[str] = []
    for m in messages:
        if m.tool_calls:
            shown.append("call:" + ",".join(c.id for c in m.tool_calls))
        elif m.role == Role.TOOL:
            shown.append(f"result:{m.tool_call_id}")
        else:
            shown.append(m.content)
    return shown


def orphans(messages: Sequence[Message]) -> list[Message]:
    """Tool results whose call is not earlier in ``messages``."""
    issued: set[str] = set()
    missing: list[Message] = []
    for m in messages:
        issued.update(c.id for c in m.tool_calls)
        if m.role == Role.TOOL and m.tool_call_id not in issued:
            missing.append(m)
    return missing


def unanswered(messages: Sequence[Message]) -> list[str]:
    """Ids of tool calls in ``messages`` without a result in ``messages``."""
    answered = {m.tool_call_id for m in messages if m.role == Role.TOOL}
    return [c.id for m in messages for c in m.tool_calls if c.id not in answered]

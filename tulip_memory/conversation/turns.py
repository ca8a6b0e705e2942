"""How a message history divides into turns: pure helpers shared by the managers.

A history may only be cut where no tool call is separated from the results answering
it (a provider rejects a tool result whose call is missing). :func:`cut_points` lists
those places; the messages between two neighbouring cut points form one turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from tulip_memory.messages import Message, Role


def split_leading_system(messages: Sequence[Message]) -> tuple[list[Message], list[Message]]:
    """The leading run of system messages, and everything after it."""
    end = 0
    while end < len(messages) and messages[end].role == Role.SYSTEM:
        end += 1
    return list(messages[:end]), list(messages[end:])


def cut_points(messages: Sequence[Message]) -> list[int]:
    """Every ``i`` (``0 <= i <= len(messages)``) where ``messages[:i]`` and
    ``messages[i:]`` split no tool call from a result answering it, ascending."""
    issued: dict[str, int] = {}
    spans = [0] * (len(messages) + 2)  # difference array of cuts inside a call's span
    for index, message in enumerate(messages):
        if message.role == Role.ASSISTANT:
            issued.update((call.id, index) for call in message.tool_calls)
        elif message.role == Role.TOOL and message.tool_call_id in issued:
            spans[issued[message.tool_call_id] + 1] += 1
            spans[index + 1] -= 1
    cuts: list[int] = []
    open_spans = 0
    for index in range(len(messages) + 1):
        open_spans += spans[index]
        if open_spans == 0:
            cuts.append(index)
    return cuts


def turn_start_at_or_before(messages: Sequence[Message], index: int) -> int:
    """The nearest cut point at or before ``index``."""
    return max(c for c in cut_points(messages) if c <= index)


def drop_leading_orphans(window: Sequence[Message]) -> list[Message]:
    """``window`` without the tool results at its start whose call is not in it."""
    kept = {call.id for m in window if m.role == Role.ASSISTANT for call in m.tool_calls}
    start = 0
    while (
        start < len(window)
        and window[start].role == Role.TOOL
        and window[start].tool_call_id not in kept
    ):
        start += 1
    return list(window[start:])


def first_user(messages: Sequence[Message]) -> Message | None:
    """The first user message, if any."""
    return next((m for m in messages if m.role == Role.USER), None)


def has_user_turn(messages: Sequence[Message]) -> bool:
    """Whether any message is the user's."""
    return first_user(messages) is not None

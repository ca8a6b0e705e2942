"""The messages a state shares with the last one saved, known by identity, so a save
encodes only the messages after them.

Pure functions, no I/O. :class:`~tulip_memory.messages.Message` and
:class:`~tulip_memory.messages.ToolCall` are frozen, but two of their parts are plain
dicts a caller could still change in place: ``metadata`` and each tool call's
``arguments``. :class:`Known` keeps, for the messages of the state saved last, the
objects themselves and the copies of those dicts as they were stored (parsed from the
stored bytes). A new state's first messages are *known* when they are the same objects
and those dicts still equal their copies: by ``==`` where that is exact, by their
canonical bytes where it is not (a number inside: ``1 == 1.0 == True`` would hide a
change of bytes), and a message of a subclass, or with content that is not a string, is
compared whole by its bytes. Then the saved items stand for those messages
(:func:`checkpoint_data`), and the encoders (:func:`tulip_memory.delta.segments.encode`,
:func:`tulip_wire.statedelta.advance`) encode only the messages after them: what a save
costs follows what it appended, not the thread.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tulip_memory.delta.codec import dumps
from tulip_memory.messages import Message, ToolCall
from tulip_memory.state import AgentState

#: The top-level field of a state whose items :class:`Known` follows.
MESSAGES = "messages"
_metadata = operator.attrgetter("metadata")


@dataclass(frozen=True)
class Known:
    """The messages of the state saved last and what may change inside them.

    ``items`` are their stored dicts (parsed from the stored bytes, never the caller's),
    ``metadata`` the ``metadata`` of each, ``tools`` the ``arguments`` of the tool
    calls of each message that has any, by index, and ``exact`` the indices compared
    by their bytes."""

    messages: tuple[Message, ...]
    items: Sequence[Any]
    metadata: list[Any]
    tools: tuple[tuple[int, list[Any]], ...]
    exact: tuple[int, ...]


def known_count(known: Known | None, messages: Sequence[Message]) -> int:
    """How many of ``messages`` are the known ones, unchanged: all of them (``len``
    of ``known.messages``) or 0."""
    if known is None or not known.messages or len(messages) < len(known.messages):
        return 0
    if not all(map(operator.is_, messages, known.messages)):
        return 0
    if list(map(_metadata, known.messages)) != known.metadata:
        return 0
    for i, arguments in known.tools:
        if [tc.arguments for tc in known.messages[i].tool_calls] != arguments:
            return 0
    for i in known.exact:
        if _bytes(known.messages[i]) != dumps(known.items[i]):
            return 0
    return len(known.messages)


def starts_with(items: Sequence[Any], old: Sequence[Any], count: int) -> bool:
    """Whether ``count`` (> 0) is ``len(old)`` and the first ``count`` of ``items`` are
    ``old``'s own objects: the check an encoder makes before trusting a count."""
    return 0 < count == len(old) <= len(items) and all(map(operator.is_, items, old))


def checkpoint_data(
    state: AgentState, known: Known | None
) -> tuple[dict[str, Any], dict[str, int] | None]:
    """``state.to_checkpoint()`` with the stored items standing for its known messages,
    and how many those are, by field (the encoders take the first that many items as
    the stored ones, without encoding or comparing them), or None."""
    count = known_count(known, state.messages)
    if count == 0 or known is None:
        return state.to_checkpoint(), None
    return state.to_checkpoint(encoded=known.items), {MESSAGES: count}


def known_after(
    state: object, known: Known | None, counts: dict[str, int] | None, items: object
) -> Known | None:
    """What is known once ``state`` was saved with ``items`` as its stored messages
    (``counts``: what :func:`checkpoint_data` said); None for a state that is not an
    :class:`~tulip_memory.state.AgentState`, or without stored messages."""
    if not isinstance(state, AgentState) or not isinstance(items, list):
        return None
    return extend(known, (counts or {}).get(MESSAGES, 0), state.messages, items)


def extend(
    known: Known | None, count: int, messages: Sequence[Message], items: Sequence[Any]
) -> Known | None:
    """What is known once ``messages`` were saved as ``items`` (parsed from the stored
    bytes), the first ``count`` of them the messages of ``known``; None when they are
    not one stored item each."""
    if len(items) != len(messages):
        return None
    base = known if known is not None and count else None
    start = len(base.messages) if base is not None else 0
    metadata = [*(base.metadata if base else ()), *(_copy(it, "metadata") for it in items[start:])]
    tools = list(base.tools) if base else []
    exact = list(base.exact) if base else []
    for i in range(start, len(messages)):
        message, item = messages[i], items[i]
        if not isinstance(item, dict) or not _plain(message):
            exact.append(i)
            continue
        stored = [tc.get("arguments") for tc in item.get("tool_calls") or ()]
        if stored:
            tools.append((i, stored))
        if _has_number(item.get("metadata")) or _has_number(stored):
            exact.append(i)
    return Known(tuple(messages), items, metadata, tuple(tools), tuple(exact))


def _copy(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else None


def _plain(message: Message) -> bool:
    """A message whose every part but the two dicts is frozen and a string (or None)."""
    return (
        type(message) is Message
        and isinstance(message.content, str)
        and all(type(tc) is ToolCall for tc in message.tool_calls)
    )


def _has_number(value: Any) -> bool:
    """Whether a parsed JSON value holds a number (or a bool) anywhere."""
    if isinstance(value, bool | int | float):
        return True
    if isinstance(value, dict):
        return any(_has_number(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_number(v) for v in value)
    return False


def _bytes(message: Message) -> bytes | None:
    try:
        return dumps(message.to_dict())
    except (TypeError, ValueError):
        return None

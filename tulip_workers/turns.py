"""A finished session's turns: every message with text of the user or the assistant,
indexed exactly once.

- A user message and the assistant reply right after it are one turn.
- A message without a partner is a turn of its own: assistant messages opening a
  session or following another assistant message, a user message followed by another
  user message, and a user message ending the session.
- A user message that ended an earlier session of the thread is an *open* turn: when
  the next session of the thread opens with the assistant, that reply completes it
  (the stored turn gains its reply; no second row). A session that opens by sending
  the open user message again (same message id, or the same text when neither has
  an id) does not index it twice.

System and tool messages, and assistant messages without text (tool calls), are not
turns. The embedded text is each side's text, prefixed by the speaker's ``name`` when
the message has one. Each side keeps its ``name``, ``metadata`` (message ids among
it) and time (:mod:`tulip_memory.times`: the message's, else the session's, else the
publish time); the turn's time is its first message's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tulip_memory.messages import Message, Role, message_id
from tulip_memory.store.postgres.store import StoredTurn
from tulip_memory.store.postgres.writer import TurnRow
from tulip_memory.times import caller_time

#: Payload metadata fields copied onto every turn (who and where).
ID_FIELDS = ("user_id", "session_id", "agent_id")


@dataclass(frozen=True)
class Clock:
    """The session's time (if the caller gave one) and the event's publish time."""

    session: float | None
    published: float

    def of(self, message: Message) -> float:
        return caller_time(message.metadata, self.session, self.published)


@dataclass(frozen=True)
class SessionTurns:
    """The event's own turns, and the earlier open turn its first reply completes."""

    rows: list[TurnRow]
    completion: TurnRow | None = None
    completes: StoredTurn | None = None


def session_turns(
    messages: Sequence[Message],
    *,
    clock: Clock,
    context: Mapping[str, Any],
    open_turn: StoredTurn | None = None,
) -> SessionTurns:
    """The turns of one session (see the module docstring); ``open_turn`` is the
    thread's latest stored turn, if it may still wait for its reply."""
    said = [m for m in messages if m.role in (Role.USER, Role.ASSISTANT) and m.content.strip()]
    start, completion = 0, None
    waiting = open_turn if open_turn is not None and is_open(open_turn) else None
    if waiting is not None:
        if said and said[0].role == Role.USER and _repeats(said[0], waiting):
            start = 1
        if start < len(said) and said[start].role == Role.ASSISTANT:
            completion = _complete(waiting, said[start], clock, context)
            start += 1
    rows: list[TurnRow] = []
    i = start
    while i < len(said):
        first = said[i]
        reply = said[i + 1] if i + 1 < len(said) else None
        if first.role == Role.USER and reply is not None and reply.role == Role.ASSISTANT:
            rows.append(_row(len(rows), [first, reply], clock, context))
            i += 2
        else:
            rows.append(_row(len(rows), [first], clock, context))
            i += 1
    return SessionTurns(rows, completion, waiting if completion is not None else None)


def is_open(turn: StoredTurn) -> bool:
    """A user turn still waiting for its reply."""
    return turn.turn.get("role") == Role.USER.value and "reply" not in turn.turn


def turn_context(
    namespace: Sequence[str], thread_id: str, event_id: str, metadata: Mapping[str, Any]
) -> dict[str, Any]:
    """The metadata every turn of a session carries."""
    ids = {k: metadata[k] for k in ID_FIELDS if isinstance(metadata.get(k), str)}
    return {"namespace": list(namespace), "thread_id": thread_id, "event_id": event_id, **ids}


def _side(message: Message, clock: Clock) -> dict[str, Any]:
    side: dict[str, Any] = {
        "role": message.role.value,
        "content": [{"type": "text", "text": message.content}],
        "timestamp": clock.of(message),
        "metadata": dict(message.metadata),
    }
    if message.name:
        side["name"] = message.name
    return side


def _line(message: Message) -> str:
    return f"{message.name}: {message.content}" if message.name else message.content


def _ids(messages: Sequence[Message]) -> dict[str, list[str]]:
    ids = [i for i in map(message_id, messages) if i is not None]
    return {"message_ids": ids} if ids else {}


def _row(
    position: int, said: Sequence[Message], clock: Clock, context: Mapping[str, Any]
) -> TurnRow:
    turn = _side(said[0], clock)
    if len(said) > 1:
        turn["reply"] = _side(said[1], clock)
    text = "\n".join(_line(m) for m in said)
    return TurnRow(position, text, turn, {**context, **_ids(said)}, at=turn["timestamp"])


def _complete(
    waiting: StoredTurn, reply: Message, clock: Clock, context: Mapping[str, Any]
) -> TurnRow:
    """The open turn with ``reply`` attached, at its own event and position."""
    turn = {**waiting.turn, "reply": _side(reply, clock)}
    ids = [*waiting.metadata.get("message_ids", []), *_ids([reply]).get("message_ids", [])]
    metadata = {**waiting.metadata, "completed_by": context["event_id"]}
    if ids:
        metadata["message_ids"] = ids
    text = f"{waiting.text}\n{_line(reply)}"
    return TurnRow(waiting.position, text, turn, metadata, at=waiting.at)


def _repeats(message: Message, waiting: StoredTurn) -> bool:
    """``message`` is the open turn's user message sent again."""
    stored = waiting.turn.get("metadata") or {}
    stored_id = message_id(Message(role=Role.USER, metadata=dict(stored)))
    own = message_id(message)
    if own is not None or stored_id is not None:
        return own == stored_id
    content = waiting.turn.get("content") or [{}]
    return bool(content[0].get("text") == message.content)

"""A finished session's completed turns: each user message with the reply to it.

The text embedded is the question and the answer together (what recall is asked
about); the structured turn keeps the tulip history shape with the reply attached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tulip_memory.messages import Message, Role
from tulip_memory.store.postgres.writer import TurnRow

#: Payload metadata fields copied onto every turn (who and where).
ID_FIELDS = ("user_id", "session_id", "agent_id")


def completed_turns(
    messages: Sequence[Message], *, ts: float, context: Mapping[str, Any]
) -> list[TurnRow]:
    """One row per user message that got an assistant reply (tool traffic between
    them skipped); a trailing unanswered user message is not a completed turn."""
    rows: list[TurnRow] = []
    question: Message | None = None
    for message in messages:
        if message.role == Role.USER:
            question = message
        elif message.role == Role.ASSISTANT and question is not None and message.content:
            rows.append(_row(len(rows), question, message, ts, context))
            question = None
    return rows


def _row(position: int, q: Message, a: Message, ts: float, context: Mapping[str, Any]) -> TurnRow:
    turn = {
        "role": "user",
        "content": [{"type": "text", "text": q.content}],
        "timestamp": ts,
        "metadata": dict(q.metadata),
        "reply": {"role": "assistant", "content": [{"type": "text", "text": a.content}]},
    }
    return TurnRow(position, f"{q.content}\n{a.content}", turn, dict(context))


def turn_context(
    namespace: Sequence[str], thread_id: str, event_id: str, metadata: Mapping[str, Any]
) -> dict[str, Any]:
    """The metadata every turn of a session carries."""
    ids = {k: metadata[k] for k in ID_FIELDS if isinstance(metadata.get(k), str)}
    return {"namespace": list(namespace), "thread_id": thread_id, "event_id": event_id, **ids}

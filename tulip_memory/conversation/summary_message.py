"""The system message that stands in for summarized turns.

Its text is ``[Summary of previous conversation (N messages)]:`` and the summary on the
next line. Its metadata (never sent to a model) records ``N``, so a manager that meets
its own summary again (a history saved after compaction) folds it into the next one
instead of keeping two.
"""

from __future__ import annotations

from collections.abc import Sequence

from tulip_memory.messages import Message, Role

#: Metadata key marking a summary message; its value is ``{"messages": N}``.
SUMMARY_KEY = "tulip_memory.summary"


def summary_message(text: str, covered: int) -> Message:
    """A system message holding the summary ``text`` of ``covered`` messages."""
    header = f"[Summary of previous conversation ({covered} messages)]:"
    return Message(
        role=Role.SYSTEM, content=f"{header}\n{text}", metadata={SUMMARY_KEY: {"messages": covered}}
    )


def is_summary(message: Message) -> bool:
    """Whether ``message`` is a summary made by :func:`summary_message`."""
    return message.role == Role.SYSTEM and isinstance(message.metadata.get(SUMMARY_KEY), dict)


def covered_count(message: Message) -> int:
    """How many messages ``message`` stands for: its summary's count, else 1."""
    if not is_summary(message):
        return 1
    count = message.metadata[SUMMARY_KEY].get("messages")
    return count if isinstance(count, int) and count >= 0 else 1


def summary_body(message: Message) -> str:
    """The summary text of a summary message, without its header line."""
    _, _, body = message.content.partition("\n")
    return body


def previous_summary(messages: Sequence[Message]) -> str | None:
    """The bodies of the summary messages among ``messages``, joined, or ``None``."""
    bodies = [summary_body(m) for m in messages if is_summary(m)]
    return "\n".join(bodies) if bodies else None

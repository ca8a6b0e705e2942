"""``NullManager``: the whole history, unchanged."""

from __future__ import annotations

from tulip_memory.conversation.base import ConversationManager
from tulip_memory.messages import Message


class NullManager(ConversationManager):
    """Null conversation manager - keeps all messages unchanged.

    Use this when you want to preserve the entire conversation history without any
    modifications. Suitable for short conversations or when full history is required.
    """

    def apply(self, messages: list[Message]) -> list[Message]:
        """Return messages unchanged (a copy of the list)."""
        return messages.copy()

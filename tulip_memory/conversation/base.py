"""The conversation-manager contract (``tulip.memory.conversation.ConversationManager``).

A manager decides what of a run's message history goes to the model on each request:
all of it, a window, or a summary plus recent turns. It never changes the messages it
keeps; it returns a new list.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from tulip_memory.errors import TulipMemoryError
from tulip_memory.messages import Message


class ConversationConfigError(TulipMemoryError, ValueError):
    """A conversation manager built with settings it cannot work with.

    Subclasses :class:`ValueError`, which is what the SDK's managers raise.
    """


class ConversationManager(ABC):
    """Base class for conversation management strategies.

    Conversation managers handle how message history is maintained, including
    trimming, summarization, and other memory management.
    """

    @abstractmethod
    def apply(self, messages: list[Message]) -> list[Message]:
        """Apply conversation management to ``messages`` (the full history); return the
        managed list (potentially trimmed or summarized)."""

    async def async_apply(self, messages: list[Message]) -> list[Message]:
        """Async version of :meth:`apply`, for managers that await (e.g. a model
        summarizing). By default it delegates to :meth:`apply`."""
        return self.apply(messages)

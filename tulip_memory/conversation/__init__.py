"""Conversation management (``tulip.memory.conversation``): what of a run's history
goes to the model on each request.

``NullManager`` keeps everything, ``SlidingWindowManager`` the last N messages,
``SummarizingManager`` a summary of older messages plus the recent ones; the
token-aware ``LLMCompactor`` lives in :mod:`tulip_memory.compactor`.
"""

from tulip_memory.conversation.base import ConversationConfigError, ConversationManager
from tulip_memory.conversation.null import NullManager
from tulip_memory.conversation.summarizing import SummarizeFn, SummarizingManager
from tulip_memory.conversation.summary_message import SUMMARY_KEY, is_summary, summary_message
from tulip_memory.conversation.window import SlidingWindowManager

__all__ = [
    "SUMMARY_KEY",
    "ConversationConfigError",
    "ConversationManager",
    "NullManager",
    "SlidingWindowManager",
    "SummarizeFn",
    "SummarizingManager",
    "is_summary",
    "summary_message",
]

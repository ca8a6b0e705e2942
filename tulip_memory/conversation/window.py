"""``SlidingWindowManager``: the leading system messages and the last N messages.

When the window would retain no user turn at all, the opening request is re-attached.
That case is an agent loop (assistant/tool all the way down) where the first user
message is the task; losing it leaves the model with a role description and a wall of
tool output, and Qwen-family chat templates fail outright ("No user query found in
messages."). A chat is left alone: while any user turn survives, the newest ones are
the live context and the first is not privileged.

Only the leading system messages are kept at the front. A system note added mid-run
stays where it was written and leaves with the turns around it: moving it would change
the start of every later request, and a provider's prompt cache serves only a
byte-identical prefix. For the same reason the window slides in steps of
``slide_step``: it holds between ``window_size - slide_step + 1`` and ``window_size``
messages, and all but one request in ``slide_step`` reuses the cache.
"""

from __future__ import annotations

from tulip_memory.conversation.base import ConversationConfigError, ConversationManager
from tulip_memory.conversation.turns import (
    drop_leading_orphans,
    first_user,
    has_user_turn,
    split_leading_system,
)
from tulip_memory.events import EV_MEMORY_CONVERSATION_PRUNED, emit_sync
from tulip_memory.messages import Message


class SlidingWindowManager(ConversationManager):
    """Sliding window conversation manager - keeps the last ``window_size`` messages
    (excluding the leading system messages, kept when ``preserve_system``)."""

    def __init__(
        self,
        window_size: int = 20,
        preserve_system: bool = True,
        preserve_first_user: bool = True,
        slide_step: int = 1,
    ) -> None:
        if window_size < 1:
            raise ConversationConfigError("window_size must be at least 1")
        if not 1 <= slide_step <= window_size:
            raise ConversationConfigError("slide_step must be between 1 and window_size")
        self.window_size = window_size
        self.preserve_system = preserve_system
        self.preserve_first_user = preserve_first_user
        self.slide_step = slide_step

    def apply(self, messages: list[Message]) -> list[Message]:
        """The leading system messages and the window; emits
        ``memory.conversation.pruned`` with the number of messages removed."""
        front, rest = self._split(messages)
        if len(rest) <= self.window_size:
            return [*front, *rest]
        window = self._window(rest)
        emit_sync(
            EV_MEMORY_CONVERSATION_PRUNED,
            strategy="sliding_window",
            window_size=self.window_size,
            # What actually went: orphan trimming and the re-attached anchor both move it.
            removed_count=len(rest) - len(window),
        )
        return [*front, *window]

    def _split(self, messages: list[Message]) -> tuple[list[Message], list[Message]]:
        if self.preserve_system:
            return split_leading_system(messages)
        return [], list(messages)

    def _window(self, rest: list[Message]) -> list[Message]:
        anchor = first_user(rest) if self.preserve_first_user else None
        # Whole steps go at once, so the cut stays put until the window refills. The cut
        # can fall inside a block of tool results, which would then be orphans.
        window = drop_leading_orphans(rest[self._drop_count(len(rest)) :])
        if anchor is None or has_user_turn(window):
            return window
        if len(window) >= self.window_size:
            # No slot for the anchor: make the cut the next slide would make anyway.
            window = drop_leading_orphans(window[self.slide_step :])
        return [anchor, *window]

    def _drop_count(self, count: int) -> int:
        excess = count - self.window_size
        return -(-excess // self.slide_step) * self.slide_step

"""``SummarizingManager``: older messages folded into one summary message.

Past ``threshold`` messages (the leading system messages not counted), all but the
``keep_recent`` newest are replaced by a system message
``[Summary of previous conversation (N messages)]:`` right after the leading system
messages. The summary comes from ``summarize_fn`` (awaited in :meth:`async_apply` when
it is async) or, without one, from the offline extractive summarizer.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tulip_memory.conversation.base import ConversationConfigError, ConversationManager
from tulip_memory.conversation.summary_message import (
    covered_count,
    is_summary,
    previous_summary,
    summary_message,
)
from tulip_memory.conversation.turns import split_leading_system, turn_start_at_or_before
from tulip_memory.events import (
    EV_MEMORY_COMPACTOR_COMPLETED,
    EV_MEMORY_COMPACTOR_TRIGGERED,
    emit,
    emit_sync,
)
from tulip_memory.messages import Message
from tulip_memory.summarize import extractive_summary

logger = logging.getLogger(__name__)

#: ``(messages) -> summary text``, a plain function or a coroutine function.
SummarizeFn = Callable[[list[Message]], Awaitable[str] | str]


@dataclass(frozen=True)
class _Split:
    front: list[Message]  # leading system messages, kept as they are
    old: list[Message]  # to summarize
    recent: list[Message]
    counted: int  # messages that counted against the threshold


class SummarizingManager(ConversationManager):
    """Summarizing conversation manager - summarizes older messages.

    When the conversation exceeds ``threshold`` messages, older messages are
    summarized into a single summary message, preserving the ``keep_recent`` newest.
    """

    def __init__(
        self,
        threshold: int = 30,
        keep_recent: int = 10,
        summarize_fn: SummarizeFn | None = None,
        preserve_system: bool = True,
    ) -> None:
        if threshold < 1:
            raise ConversationConfigError("threshold must be at least 1")
        if keep_recent < 1:
            raise ConversationConfigError("keep_recent must be at least 1")
        if keep_recent >= threshold:
            raise ConversationConfigError("keep_recent must be less than threshold")
        self.threshold = threshold
        self.keep_recent = keep_recent
        self.summarize_fn = summarize_fn
        self.preserve_system = preserve_system

    def apply(self, messages: list[Message]) -> list[Message]:
        """Summarize older messages past the threshold. A coroutine ``summarize_fn``
        cannot be awaited here: the offline summary stands in for it."""
        split = self._split(messages)
        if split is None:
            return list(messages)
        emit_sync(EV_MEMORY_COMPACTOR_TRIGGERED, **self._triggered(split))
        started = time.perf_counter()
        result = self._assemble(split, self._summary_now(split.old))
        emit_sync(EV_MEMORY_COMPACTOR_COMPLETED, **self._completed(split, result, started))
        return result

    async def async_apply(self, messages: list[Message]) -> list[Message]:
        """:meth:`apply`, awaiting an async ``summarize_fn``."""
        split = self._split(messages)
        if split is None:
            return list(messages)
        await emit(EV_MEMORY_COMPACTOR_TRIGGERED, **self._triggered(split))
        started = time.perf_counter()
        result = self._assemble(split, await self._summary_awaited(split.old))
        await emit(EV_MEMORY_COMPACTOR_COMPLETED, **self._completed(split, result, started))
        return result

    def _split(self, messages: list[Message]) -> _Split | None:
        """Where to cut, or ``None`` when nothing is to be summarized."""
        front, rest = split_leading_system(messages) if self.preserve_system else ([], messages)
        # An earlier summary is history to fold into the next one, not an instruction.
        earlier = [m for m in front if is_summary(m)]
        front = [m for m in front if not is_summary(m)]
        rest = [*earlier, *rest]
        if len(rest) <= self.threshold:
            return None
        # Recent turns never start with tool results whose call would be summarized.
        cut = turn_start_at_or_before(rest, len(rest) - self.keep_recent)
        old, recent = rest[:cut], rest[cut:]
        if all(is_summary(m) for m in old):
            return None
        return _Split(front, old, recent, len(rest))

    def _assemble(self, split: _Split, text: str) -> list[Message]:
        covered = sum(covered_count(m) for m in split.old)
        return [*split.front, summary_message(text, covered), *split.recent]

    def _summary_now(self, old: list[Message]) -> str:
        fn = self.summarize_fn
        if fn is None or _is_async(fn):
            return self._generate_summary(old)
        try:
            result = fn(old)
        except Exception:
            logger.exception("summarize_fn failed; using the offline summary")
            return self._generate_summary(old)
        if inspect.isawaitable(result):
            _discard(result)
            logger.warning("summarize_fn returned an awaitable to apply(); use async_apply()")
            return self._generate_summary(old)
        return str(result)

    async def _summary_awaited(self, old: list[Message]) -> str:
        if self.summarize_fn is None:
            return self._generate_summary(old)
        try:
            result = self.summarize_fn(old)
            return str(await result if inspect.isawaitable(result) else result)
        except Exception:
            logger.exception("summarize_fn failed; using the offline summary")
            return self._generate_summary(old)

    def _generate_summary(self, old: list[Message]) -> str:
        """The offline summary: an earlier summary, then the most informative
        sentence of each turn after it."""
        turns = [m for m in old if not is_summary(m)]
        return extractive_summary(previous_summary(old), turns)

    def _triggered(self, split: _Split) -> dict[str, Any]:
        return {
            "strategy": "summarizing",
            "messages_before": split.counted,
            "threshold": self.threshold,
        }

    def _completed(self, split: _Split, result: list[Message], started: float) -> Mapping[str, Any]:
        return {
            "strategy": "summarizing",
            "messages_before": split.counted,
            "messages_after": len(result),
            "summarized_count": len(split.old),
            "duration_ms": (time.perf_counter() - started) * 1000,
        }


def _is_async(fn: object) -> bool:
    """A coroutine function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004
    )


def _discard(awaitable: object) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()

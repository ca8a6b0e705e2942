"""``SummarizingManager``: older messages folded into one summary message.

Past ``threshold`` messages (system messages not counted), all but the ``keep_recent``
newest are replaced by a system message ``[Summary of previous conversation (N
messages)]:``. The summary comes from ``summarize_fn`` (awaited in :meth:`async_apply`
when it is async) or, without one, from the offline extractive summarizer; a
``summarize_fn`` that raises is logged and the offline summary stands in.

``strategy="seed"`` (the default) is the seed's loop, message for message, so a ported
agent sees the same context: with ``preserve_system`` every system message is taken
out of the history and the *last* one is put first (the others are dropped), at any
length; past the threshold the summary follows it, then the ``keep_recent`` newest.

``strategy="turns"`` is this project's extension: the leading system messages stay as
they are and in order, a system note added mid-run stays history (summarized with the
turns around it) rather than becoming the system prompt, an earlier summary is folded
into the next one (its count carried on), and the recent part never starts with tool
results whose call was summarized.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

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
from tulip_memory.messages import Message, Role
from tulip_memory.redaction import failure
from tulip_memory.summarize import extractive_summary

logger = logging.getLogger(__name__)

#: ``(messages) -> summary text``, a plain function or a coroutine function.
SummarizeFn = Callable[[list[Message]], Awaitable[str] | str]
#: Which messages are kept and where the cut falls (see the module docstring).
Strategy = Literal["seed", "turns"]


@dataclass(frozen=True)
class _Split:
    front: list[Message]  # leading system messages, kept as they are
    old: list[Message]  # to summarize
    recent: list[Message]
    counted: int  # messages that counted against the threshold
    covered: int  # messages the summary stands for


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
        *,
        strategy: Strategy = "seed",
    ) -> None:
        if threshold < 1:
            raise ConversationConfigError("threshold must be at least 1")
        if keep_recent < 1:
            raise ConversationConfigError("keep_recent must be at least 1")
        if keep_recent >= threshold:
            raise ConversationConfigError("keep_recent must be less than threshold")
        if strategy not in ("seed", "turns"):
            raise ConversationConfigError(f"strategy must be 'seed' or 'turns', got {strategy!r}")
        self.strategy: Strategy = strategy
        self.threshold = threshold
        self.keep_recent = keep_recent
        self.summarize_fn = summarize_fn
        self.preserve_system = preserve_system

    def apply(self, messages: list[Message]) -> list[Message]:
        """Summarize older messages past the threshold. A coroutine ``summarize_fn``
        cannot be awaited here: the offline summary stands in for it."""
        split = self._split(messages)
        if isinstance(split, list):
            return split
        emit_sync(EV_MEMORY_COMPACTOR_TRIGGERED, **self._triggered(split))
        started = time.perf_counter()
        result = self._assemble(split, self._summary_now(split.old))
        emit_sync(EV_MEMORY_COMPACTOR_COMPLETED, **self._completed(split, result, started))
        return result

    async def async_apply(self, messages: list[Message]) -> list[Message]:
        """:meth:`apply`, awaiting an async ``summarize_fn``."""
        split = self._split(messages)
        if isinstance(split, list):
            return split
        await emit(EV_MEMORY_COMPACTOR_TRIGGERED, **self._triggered(split))
        started = time.perf_counter()
        result = self._assemble(split, await self._summary_awaited(split.old))
        await emit(EV_MEMORY_COMPACTOR_COMPLETED, **self._completed(split, result, started))
        return result

    def _split(self, messages: list[Message]) -> _Split | list[Message]:
        """Where to cut, or the messages to return when nothing is to be summarized."""
        if self.strategy == "seed":
            return self._split_seed(messages)
        front, rest = split_leading_system(messages) if self.preserve_system else ([], messages)
        # An earlier summary is history to fold into the next one, not an instruction.
        earlier = [m for m in front if is_summary(m)]
        front = [m for m in front if not is_summary(m)]
        rest = [*earlier, *rest]
        if len(rest) <= self.threshold:
            return list(messages)
        # Recent turns never start with tool results whose call would be summarized.
        cut = turn_start_at_or_before(rest, len(rest) - self.keep_recent)
        old, recent = rest[:cut], rest[cut:]
        if all(is_summary(m) for m in old):
            return list(messages)
        covered = sum(covered_count(m) for m in old)
        return _Split(front, old, recent, len(rest), covered)

    def _split_seed(self, messages: list[Message]) -> _Split | list[Message]:
        """The seed's loop: the last system message first, the others dropped."""
        system: list[Message] = []
        rest: list[Message] = []
        for message in messages:
            if message.role == Role.SYSTEM and self.preserve_system:
                system = [message]
            else:
                rest.append(message)
        if len(rest) <= self.threshold:
            return [*system, *rest]
        old, recent = rest[: -self.keep_recent], rest[-self.keep_recent :]
        return _Split(system, old, recent, len(rest), len(old))

    def _assemble(self, split: _Split, text: str) -> list[Message]:
        return [*split.front, summary_message(text, split.covered), *split.recent]

    def _summary_now(self, old: list[Message]) -> str:
        fn = self.summarize_fn
        if fn is None or _is_async(fn):
            return self._generate_summary(old)
        try:
            result = fn(old)
        except Exception as e:
            logger.error("summarize_fn failed; using the offline summary: %s", failure(e))
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
        except Exception as e:
            logger.error("summarize_fn failed; using the offline summary: %s", failure(e))
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

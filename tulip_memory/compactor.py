"""``LLMCompactor`` (``tulip.memory.compactor``): token-aware compaction of old turns.

It fires only when a history's estimated tokens exceed ``trigger_fraction *
context_length``, and then protects the leading system messages, the first
``head_turns`` turns (the anchor: the request and the first answer) and a tail of the
newest turns within ``tail_token_fraction * context_length`` tokens (at least the last
turn). Between head and tail:

1. Stale tool output is pruned first: each tool result there is replaced by a short
   placeholder (its call id kept, so the call stays answered). If that alone brings the
   history under the trigger, that is the result: no model call, nothing dropped.
2. Otherwise the middle goes. With a ``summary_provider`` whose summary covers exactly
   what goes (checked by fingerprint), that summary stands in for it; else, with a
   ``summarize_fn``, ``summarize_fn(new_messages, previous_summary)`` extends the last
   summary with the turns dropped since; without either the middle is simply dropped.

A turn is a message together with the tool results answering its calls: a cut never
separates a tool call from its results.

Tokens are counted by litellm's tokenizer for ``model`` when litellm knows the model,
else estimated by :func:`estimate_message_tokens` (about four characters a token, plus
:data:`MESSAGE_OVERHEAD_TOKENS` per message). :meth:`LLMCompactor.apply` cannot await:
it prunes and drops, reusing the last summary only when it still covers the middle.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tulip_memory.conversation.base import ConversationConfigError, ConversationManager
from tulip_memory.conversation.summary_message import (
    covered_count,
    is_summary,
    previous_summary,
    summary_message,
)
from tulip_memory.conversation.turns import cut_points, split_leading_system
from tulip_memory.events import (
    EV_MEMORY_COMPACTOR_COMPLETED,
    EV_MEMORY_COMPACTOR_TRIGGERED,
    emit,
    emit_sync,
)
from tulip_memory.messages import Message, Role
from tulip_memory.model_calls import estimate_tokens, import_litellm
from tulip_memory.redaction import failure
from tulip_memory.summarize import Summary, fingerprint

logger = logging.getLogger(__name__)

#: ``async (messages, previous_summary) -> summary``: extends ``previous_summary``
#: (``None`` the first time) with ``messages``.
SummarizeFn = Callable[[list[Message], str | None], Awaitable[str]]
#: ``async (messages) -> Summary | None``: a summary computed in the background for this
#: history (its ``[start, end)`` index into ``messages``), or ``None``.
SummaryProvider = Callable[[list[Message]], Awaitable[Summary | None]]
TokenCounter = Callable[[Message], int]

#: Tokens a chat format adds per message (role and separators), in the estimate.
MESSAGE_OVERHEAD_TOKENS = 4
#: What a pruned tool result says instead of its output.
PRUNED_TOOL_OUTPUT = "[tool output pruned to save context]"


def message_text(message: Message) -> str:
    """The text of ``message`` a model reads: content, and each tool call's name and
    JSON arguments."""
    calls = [f"{c.name}({json.dumps(c.arguments, default=str)})" for c in message.tool_calls]
    return "\n".join([message.content, *calls]) if calls else message.content


def estimate_message_tokens(message: Message) -> int:
    """The tokenizer-free estimate: about four characters a token, plus
    :data:`MESSAGE_OVERHEAD_TOKENS`."""
    return estimate_tokens(message_text(message)) + MESSAGE_OVERHEAD_TOKENS


def litellm_token_counter(model: str) -> TokenCounter | None:
    """A counter using litellm's tokenizer for ``model``, or ``None`` when litellm does
    not know the model. Imports litellm."""
    litellm = import_litellm()
    known = getattr(litellm, "model_cost", {})
    if model not in known and model.split("/", 1)[-1] not in known:
        return None

    def count(message: Message) -> int:
        try:
            tokens = int(litellm.token_counter(model=model, text=message_text(message)))
        except Exception:
            return estimate_message_tokens(message)
        return tokens + MESSAGE_OVERHEAD_TOKENS

    return count


def prune_tool_output(message: Message) -> Message:
    """``message`` with its tool output replaced by :data:`PRUNED_TOOL_OUTPUT`."""
    if message.role != Role.TOOL or len(message.content) <= len(PRUNED_TOOL_OUTPUT):
        return message
    return replace(message, content=PRUNED_TOOL_OUTPUT)


@dataclass(frozen=True)
class CompactionPlan:
    """Where a history divides: ``front`` (leading system messages), ``head``,
    ``middle`` and ``tail`` are ``[start, end)`` ranges of its indices. ``prior`` are
    summaries of an earlier compaction found in the front."""

    front: range
    head: range
    middle: range
    tail: range
    prior: tuple[Message, ...]


def plan_compaction(
    messages: Sequence[Message], counts: Sequence[int], *, head_turns: int, tail_budget: int
) -> CompactionPlan:
    """Head: the first ``head_turns`` turns after the leading system messages. Tail:
    the newest turns within ``tail_budget`` tokens, and at least the last turn."""
    front_end = len(split_leading_system(messages)[0])
    end = len(messages)
    cuts = [c for c in cut_points(messages) if c >= front_end]
    head_end = cuts[head_turns] if head_turns < len(cuts) else end
    tail_start = end
    used = 0
    for cut in reversed([c for c in cuts if head_end <= c < end]):
        used += sum(counts[cut:tail_start])
        if used > tail_budget and tail_start < end:
            break
        tail_start = cut
    prior = tuple(m for m in messages[:front_end] if is_summary(m))
    return CompactionPlan(
        range(0, front_end),
        range(front_end, head_end),
        range(head_end, tail_start),
        range(tail_start, end),
        prior,
    )


@dataclass(frozen=True)
class _Memo:
    """The last summary made: it covers ``messages[start:end]`` of a history."""

    text: str
    start: int
    end: int
    fingerprint: str


@dataclass(frozen=True)
class _Run:
    """One compaction in progress."""

    messages: list[Message]
    counts: list[int]
    plan: CompactionPlan
    started: float

    @property
    def tokens(self) -> int:
        return sum(self.counts)


@dataclass(frozen=True)
class _Outcome:
    messages: list[Message]
    action: str  # "unchanged", "pruned", "summarized" or "dropped"
    summary_source: str | None = None  # "provider", "summarize_fn", "cached" or None
    removed_count: int = 0  # messages of the history left out of the window
    summarized_count: int = 0  # messages the window's new summary stands for
    pruned_count: int = 0  # tool results whose output was pruned


class LLMCompactor(ConversationManager):
    """Token-aware conversation manager with head / tail protection (see the module
    docstring). ``model`` picks litellm's tokenizer; ``token_counter`` replaces
    token counting altogether."""

    def __init__(
        self,
        context_length: int = 128_000,
        trigger_fraction: float = 0.8,
        head_turns: int = 2,
        tail_token_fraction: float = 0.5,
        summarize_fn: SummarizeFn | None = None,
        *,
        summary_provider: SummaryProvider | None = None,
        model: str | None = None,
        token_counter: TokenCounter | None = None,
    ) -> None:
        if context_length < 1:
            raise ConversationConfigError("context_length must be at least 1")
        if not 0.0 < trigger_fraction <= 1.0:
            raise ConversationConfigError("trigger_fraction must be in (0, 1]")
        if head_turns < 0:
            raise ConversationConfigError("head_turns must not be negative")
        if not 0.0 < tail_token_fraction < 1.0:
            raise ConversationConfigError("tail_token_fraction must be in (0, 1)")
        self.context_length = context_length
        self.trigger_fraction = trigger_fraction
        self.head_turns = head_turns
        self.tail_token_fraction = tail_token_fraction
        self.summarize_fn = summarize_fn
        self.summary_provider = summary_provider
        self.model = model
        self._token_counter = token_counter
        self._memo: _Memo | None = None

    @property
    def trigger_tokens(self) -> float:
        """Compaction fires above this many tokens."""
        return self.trigger_fraction * self.context_length

    @property
    def tail_budget(self) -> int:
        """Tokens the protected tail may hold."""
        return int(self.tail_token_fraction * self.context_length)

    def count_tokens(self, message: Message) -> int:
        """The tokens ``message`` is counted as."""
        if self._token_counter is None:
            counter = litellm_token_counter(self.model) if self.model else None
            self._token_counter = counter or estimate_message_tokens
        return self._token_counter(message)

    def apply(self, messages: list[Message]) -> list[Message]:
        """Compact without awaiting: prune, then drop the middle (keeping the last
        summary only while it still covers the middle)."""
        run = self._start(messages)
        if run is None:
            return list(messages)
        emit_sync(EV_MEMORY_COMPACTOR_TRIGGERED, **self._triggered(run))
        outcome = self._pruned(run) or self._without_model(run)
        emit_sync(EV_MEMORY_COMPACTOR_COMPLETED, **self._completed(run, outcome))
        return outcome.messages

    async def async_apply(self, messages: list[Message]) -> list[Message]:
        """Compact, using the ``summary_provider`` or ``summarize_fn`` when the middle
        must go."""
        run = self._start(messages)
        if run is None:
            return list(messages)
        await emit(EV_MEMORY_COMPACTOR_TRIGGERED, **self._triggered(run))
        outcome = self._pruned(run) or await self._with_model(run)
        await emit(EV_MEMORY_COMPACTOR_COMPLETED, **self._completed(run, outcome))
        return outcome.messages

    # -- steps ---------------------------------------------------------------------

    def _start(self, messages: list[Message]) -> _Run | None:
        """The run, or ``None`` when the history is within the trigger."""
        counts = [self.count_tokens(m) for m in messages]
        if sum(counts) <= self.trigger_tokens:
            return None
        plan = plan_compaction(
            messages, counts, head_turns=self.head_turns, tail_budget=self.tail_budget
        )
        return _Run(messages, counts, plan, time.perf_counter())

    def _pruned(self, run: _Run) -> _Outcome | None:
        """The history with the middle's tool output pruned, if that is enough."""
        middle = run.plan.middle
        pruned = [prune_tool_output(run.messages[i]) for i in middle]
        changed = sum(1 for i, m in zip(middle, pruned, strict=True) if m is not run.messages[i])
        saved = sum(run.counts[i] for i in middle) - sum(self.count_tokens(m) for m in pruned)
        if not changed or run.tokens - saved > self.trigger_tokens:
            return None
        window = [*run.messages[: middle.start], *pruned, *run.messages[middle.stop :]]
        return _Outcome(window, "pruned", pruned_count=changed)

    async def _with_model(self, run: _Run) -> _Outcome:
        plan = run.plan
        if not plan.middle:
            return self._without_model(run)
        provided = await self._provided(run)
        if provided is not None:
            text, covered = provided
            return self._summarized(run, text, covered, "provider")
        if self.summarize_fn is None:
            return self._without_model(run)
        previous, new = self._pending(run)
        if not new and previous is not None:
            return self._summarized(run, previous, self._covered(run), "cached")
        try:
            text = await self.summarize_fn(new, previous)
        except Exception as e:
            logger.error("summarize_fn failed; dropping the middle instead: %s", failure(e))
            return self._without_model(run)
        self._remember(run, text)
        return self._summarized(run, text, self._covered(run), "summarize_fn")

    def _without_model(self, run: _Run) -> _Outcome:
        """Drop the middle; a summary made earlier stays only if it still covers it."""
        if not run.plan.middle:  # head and tail are all there is: nothing may go
            return _Outcome(list(run.messages), "unchanged")
        memo = self._memo
        if not run.plan.prior and memo is not None and self._memo_covers(run, memo):
            return self._summarized(run, memo.text, memo.end - memo.start, "cached")
        return self._summarized(run, None, 0, None)

    def _summarized(
        self, run: _Run, text: str | None, covered: int, source: str | None
    ) -> _Outcome:
        """The window: front, summary (or the prior ones when there is none), head, tail."""
        plan, messages = run.plan, run.messages
        front = [messages[i] for i in plan.front if not is_summary(messages[i])]
        recap = [summary_message(text, covered)] if text is not None else list(plan.prior)
        head = messages[plan.head.start : plan.head.stop]
        tail = messages[plan.tail.start : plan.tail.stop]
        return _Outcome(
            [*front, *recap, *head, *tail],
            "summarized" if text is not None else "dropped",
            source,
            removed_count=len(plan.middle),
            summarized_count=covered if text is not None else 0,
        )

    # -- summaries -----------------------------------------------------------------

    async def _provided(self, run: _Run) -> tuple[str, int] | None:
        """The provider's summary, if it covers the whole middle of this history."""
        if self.summary_provider is None:
            return None
        try:
            summary = await self.summary_provider(run.messages)
        except Exception as e:
            logger.error("summary_provider failed; compacting without it: %s", failure(e))
            return None
        middle = run.plan.middle
        if summary is None or not summary.covers(run.messages, middle.start, middle.stop):
            logger.debug("no current background summary; compacting without it")
            return None
        return summary.text, summary.message_count

    def _pending(self, run: _Run) -> tuple[str | None, list[Message]]:
        """The summary to extend and the middle messages it does not cover yet."""
        plan, messages = run.plan, run.messages
        middle = messages[plan.middle.start : plan.middle.stop]
        if plan.prior:  # a compacted history: its summary covers what came before
            return previous_summary(plan.prior), middle
        memo = self._memo
        if memo is not None and memo.start == plan.middle.start and self._memo_matches(run, memo):
            return memo.text, messages[memo.end : plan.middle.stop]
        return None, middle

    def _covered(self, run: _Run) -> int:
        """How many messages a new summary of this run's middle stands for."""
        memo = self._memo
        if not run.plan.prior and memo is not None and self._memo_covers(run, memo):
            return memo.end - memo.start
        return sum(covered_count(m) for m in run.plan.prior) + len(run.plan.middle)

    def _remember(self, run: _Run, text: str) -> None:
        if run.plan.prior:  # indices of a compacted history mean nothing next time
            self._memo = None
            return
        middle = run.plan.middle
        covered = run.messages[middle.start : middle.stop]
        self._memo = _Memo(text, middle.start, middle.stop, fingerprint(covered))

    def _memo_matches(self, run: _Run, memo: _Memo) -> bool:
        if memo.end > len(run.messages):
            return False
        return fingerprint(run.messages[memo.start : memo.end]) == memo.fingerprint

    def _memo_covers(self, run: _Run, memo: _Memo) -> bool:
        middle = run.plan.middle
        return (
            memo.start == middle.start and memo.end >= middle.stop and self._memo_matches(run, memo)
        )

    # -- events --------------------------------------------------------------------

    def _triggered(self, run: _Run) -> dict[str, Any]:
        return {
            "strategy": "llm_compactor",
            "messages_before": len(run.messages),
            "tokens_before": run.tokens,
            "trigger_tokens": self.trigger_tokens,
            "context_length": self.context_length,
        }

    def _completed(self, run: _Run, outcome: _Outcome) -> dict[str, Any]:
        return {
            "strategy": "llm_compactor",
            "action": outcome.action,
            "summary_source": outcome.summary_source,
            "messages_before": len(run.messages),
            "messages_after": len(outcome.messages),
            "tokens_before": run.tokens,
            "tokens_after": sum(self.count_tokens(m) for m in outcome.messages),
            "removed_count": outcome.removed_count,
            "summarized_count": outcome.summarized_count,
            "pruned_count": outcome.pruned_count,
            "duration_ms": (time.perf_counter() - run.started) * 1000,
        }

    def __repr__(self) -> str:
        return (
            f"LLMCompactor(context_length={self.context_length}, "
            f"trigger_fraction={self.trigger_fraction}, head_turns={self.head_turns}, "
            f"tail_token_fraction={self.tail_token_fraction})"
        )

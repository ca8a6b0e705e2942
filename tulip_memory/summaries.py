"""Thread summaries kept next to the thread's checkpoints, and the compacted view.

A background worker summarizes the middle of a long thread (everything between the
anchor — leading system messages and the first ``head_turns`` user turns — and the
``keep_recent`` newest messages) and stores the :class:`~tulip_memory.summarize.Summary`
with the range it covers in the checkpoint storage, under ``summaries/<hh>/<thread>``.
The request path then only reads it: :func:`compacted_view` is anchor + summary + the
messages after it, and only when the summary still matches the thread's messages
(checked by fingerprint); otherwise the caller falls back to its own compaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from tulip_memory.compactor import estimate_message_tokens
from tulip_memory.conversation.summary_message import summary_message
from tulip_memory.conversation.turns import cut_points, split_leading_system
from tulip_memory.delta.keys import SUMMARIES, ThreadKeys
from tulip_memory.delta.storage import DeltaStorage
from tulip_memory.messages import Message, Role
from tulip_memory.summarize import Summary


@dataclass(frozen=True)
class SummaryRange:
    """``messages[start:end]`` is what a summary should cover; empty when end <= start."""

    start: int
    end: int

    @property
    def empty(self) -> bool:
        return self.end <= self.start


def summary_range(messages: Sequence[Message], head_turns: int, keep_recent: int) -> SummaryRange:
    """The middle of a thread: after the anchor, before the newest ``keep_recent``
    messages, both ends moved so no tool call is split from its results."""
    system, rest = split_leading_system(messages)
    start = len(system) + _after_user_turns(rest, head_turns)
    cuts = cut_points(messages)
    end = max((c for c in cuts if c <= len(messages) - keep_recent), default=0)
    start = min((c for c in cuts if c >= start), default=len(messages))
    return SummaryRange(start, end)


@dataclass(frozen=True)
class SummaryBudget:
    """When a thread is due a summary job: it holds more than ``over_tokens`` and the
    part a job would add (the middle of the thread, :func:`summary_range`, after what
    its summary covers) holds at least ``step_tokens``, so a job extends the summary by
    a step, never by one turn per checkpoint."""

    over_tokens: int = 6000
    step_tokens: int = 1500
    head_turns: int = 2
    keep_recent: int = 10

    def __post_init__(self) -> None:
        if min(self.over_tokens, self.step_tokens, self.head_turns, self.keep_recent) < 0:
            raise ValueError(f"summary budget values must be >= 0: {self!r}")

    def range(self, messages: Sequence[Message]) -> SummaryRange:
        return summary_range(messages, self.head_turns, self.keep_recent)

    def covered_end(self, messages: Sequence[Message], summary: Summary | None) -> int | None:
        """Where ``summary`` ends if a job would extend it (it still matches), else None."""
        if summary is None or summary.start != self.range(messages).start:
            return None
        return summary.end if summary.matches(messages) else None

    def unsummarized(self, messages: Sequence[Message], covered_end: int | None) -> int:
        """Tokens a job would add to a summary ending at ``covered_end`` (None: none)."""
        wanted = self.range(messages)
        start = max(wanted.start, covered_end or 0)
        return sum(estimate_message_tokens(m) for m in messages[start : wanted.end])

    def due(self, messages: Sequence[Message], covered_end: int | None) -> bool:
        """Whether a thread with a summary ending at ``covered_end`` needs a job."""
        if self.unsummarized(messages, covered_end) < max(1, self.step_tokens):
            return False
        return sum(estimate_message_tokens(m) for m in messages) > self.over_tokens


def _after_user_turns(messages: Sequence[Message], turns: int) -> int:
    """Index just before the ``turns + 1``-th user message (all of it if fewer)."""
    seen = 0
    for i, m in enumerate(messages):
        if m.role == Role.USER:
            if seen == turns:
                return i
            seen += 1
    return len(messages)


def compacted_view(messages: Sequence[Message], summary: Summary | None) -> list[Message] | None:
    """Anchor + summary + what follows it; ``None`` when the summary is missing or no
    longer matches these messages (never a wrong window)."""
    if summary is None or not summary.matches(messages):
        return None
    covered = summary.end - summary.start
    return [
        *messages[: summary.start],
        summary_message(summary.text, covered),
        *messages[summary.end :],
    ]


class SummaryStore:
    """Summaries in a checkpoint storage, one object per thread."""

    def __init__(self, storage: DeltaStorage) -> None:
        self.storage = storage

    @staticmethod
    def key(thread_id: str) -> str:
        return SUMMARIES + ThreadKeys.of(thread_id).part

    async def get(self, thread_id: str) -> Summary | None:
        raw = (await self.storage.read_objects([self.key(thread_id)]))[self.key(thread_id)]
        return None if raw is None else Summary.from_dict(json.loads(raw))

    async def put(self, thread_id: str, summary: Summary) -> None:
        data = json.dumps(summary.to_dict(), ensure_ascii=False).encode("utf-8")
        await self.storage.write_objects({self.key(thread_id): data})

"""``tulip.memory.conversation``: the managers as the seed documents them."""

from __future__ import annotations

import pytest

from tests.support.events import recording
from tulip_memory.conversation import (
    ConversationManager,
    NullManager,
    SlidingWindowManager,
    SummarizingManager,
)
from tulip_memory.messages import Message, Role


def msg(role: Role, text: str) -> Message:
    return Message(role=role, content=text)


def chat(n: int) -> list[Message]:
    return [msg(Role.USER if i % 2 == 0 else Role.ASSISTANT, f"m{i}") for i in range(n)]


async def test_null_manager_keeps_everything_and_copies() -> None:
    history = [msg(Role.SYSTEM, "sys"), *chat(5)]
    manager: ConversationManager = NullManager()
    kept = manager.apply(history)
    assert kept == history and kept is not history
    assert await manager.async_apply(history) == history


def test_sliding_window_defaults_and_window() -> None:
    manager = SlidingWindowManager()
    assert (manager.window_size, manager.preserve_system, manager.preserve_first_user) == (
        20,
        True,
        True,
    )
    assert manager.slide_step == 1
    history = [msg(Role.SYSTEM, "sys"), *chat(30)]
    with recording() as log:
        kept = SlidingWindowManager(window_size=4).apply(history)
    assert kept == [history[0], *history[-4:]]
    assert log.named("memory.conversation.pruned")[0]["removed_count"] == 26


def test_summarizing_defaults_and_checks() -> None:
    manager = SummarizingManager()
    assert (manager.threshold, manager.keep_recent, manager.summarize_fn) == (30, 10, None)
    assert manager.preserve_system
    for kwargs in ({"threshold": 0}, {"keep_recent": 0}, {"threshold": 5, "keep_recent": 5}):
        with pytest.raises(ValueError):
            SummarizingManager(**kwargs)  # type: ignore[arg-type]


def test_summarizing_under_threshold_keeps_only_the_last_system_message_first() -> None:
    """The quoted loop: ``system_message = msg`` for every system message."""
    first, later = msg(Role.SYSTEM, "sys"), msg(Role.SYSTEM, "later note")
    history = [first, *chat(2), later, *chat(2)]
    assert SummarizingManager().apply(history) == [later, *chat(2), *chat(2)]
    assert SummarizingManager(preserve_system=False).apply(history) == history


async def test_summarizing_over_threshold_follows_the_quoted_source() -> None:
    seen: list[list[Message]] = []

    async def summarise(messages: list[Message]) -> str:
        seen.append(messages)
        return "they planned a trip"

    first, later = msg(Role.SYSTEM, "sys"), msg(Role.SYSTEM, "later note")
    rest = chat(12)
    history = [first, *rest[:6], later, *rest[6:]]
    manager = SummarizingManager(threshold=10, keep_recent=3, summarize_fn=summarise)
    with recording() as log:
        kept = await manager.async_apply(history)
    assert seen == [rest[:-3]]
    assert kept[0] is later
    assert kept[1].role == Role.SYSTEM
    assert kept[1].content == (
        "[Summary of previous conversation (9 messages)]:\nthey planned a trip"
    )
    assert kept[2:] == rest[-3:]
    triggered = log.named("memory.compactor.triggered")
    assert triggered == [{"strategy": "summarizing", "messages_before": 12, "threshold": 10}]
    completed = log.named("memory.compactor.completed")[0]
    assert (completed["messages_after"], completed["summarized_count"]) == (5, 9)


def test_summarizing_without_summarize_fn_falls_back_to_a_summary() -> None:
    kept = SummarizingManager(threshold=4, keep_recent=2).apply(chat(8))
    assert kept[0].content.startswith("[Summary of previous conversation (6 messages)]:\n")
    assert kept[1:] == chat(8)[-2:]

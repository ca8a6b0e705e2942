"""``SummarizingManager``: older messages folded into one summary message."""

from __future__ import annotations

import logging

import pytest

from tests.conversation.history import (
    TASK,
    bot,
    call,
    chat,
    orphans,
    result,
    system,
    texts,
    user,
)
from tests.support.events import EventLog
from tulip_memory.conversation import (
    ConversationConfigError,
    SummarizingManager,
    is_summary,
)
from tulip_memory.messages import Message, Role

TRIGGERED = "memory.compactor.triggered"
COMPLETED = "memory.compactor.completed"
HEADER = "[Summary of previous conversation ({} messages)]:\n"


class Recorder:
    """An async summarize_fn that records what it was given."""

    def __init__(self, text: str = "They talked about flights.") -> None:
        self.text = text
        self.calls: list[list[Message]] = []

    async def __call__(self, messages: list[Message]) -> str:
        self.calls.append(list(messages))
        return self.text


def test_defaults() -> None:
    manager = SummarizingManager()
    assert (manager.threshold, manager.keep_recent, manager.summarize_fn) == (30, 10, None)
    assert manager.preserve_system


@pytest.mark.parametrize(
    ("threshold", "keep_recent", "message"),
    [
        (0, 1, "threshold must be at least 1"),
        (5, 0, "keep_recent must be at least 1"),
        (5, 5, "keep_recent must be less than threshold"),
        (5, 9, "keep_recent must be less than threshold"),
    ],
)
def test_invalid_settings_are_refused(threshold: int, keep_recent: int, message: str) -> None:
    with pytest.raises(ConversationConfigError, match=message) as refused:
        SummarizingManager(threshold=threshold, keep_recent=keep_recent)
    assert isinstance(refused.value, ValueError)


async def test_an_empty_history_stays_empty(events: EventLog) -> None:
    manager = SummarizingManager(summarize_fn=Recorder())
    assert manager.apply([]) == [] and await manager.async_apply([]) == []
    assert events.events == []


async def test_a_history_at_the_threshold_is_unchanged(events: EventLog) -> None:
    history = [system(), *chat(30)]
    recorder = Recorder()
    manager = SummarizingManager(summarize_fn=recorder)
    assert manager.apply(history) == history
    assert await manager.async_apply(history) == history
    assert recorder.calls == [] and events.events == []


def test_without_summarize_fn_apply_falls_back_to_an_offline_summary() -> None:
    history = [
        system(),
        user(f"Hi. {TASK}"),
        bot("Sure. The cheapest is SK 1234 at 149 EUR on 12 May."),
        *chat(10),
    ]
    kept = SummarizingManager(threshold=8, keep_recent=4).apply(history)
    assert kept[0] is history[0] and kept[2:] == history[-4:]
    summary = kept[1]
    assert summary.role == Role.SYSTEM and is_summary(summary)
    assert summary.content.startswith(HEADER.format(len(history) - 1 - 4))
    assert "Lisbon to Oslo" in summary.content and "SK 1234" in summary.content
    # The same history always gets the same summary.
    assert SummarizingManager(threshold=8, keep_recent=4).apply(history) == kept


async def test_async_apply_awaits_summarize_fn_with_the_older_messages() -> None:
    history = [system(), *chat(12)]
    recorder = Recorder()
    kept = await SummarizingManager(threshold=10, keep_recent=3, summarize_fn=recorder).async_apply(
        history
    )
    assert recorder.calls == [history[1:-3]]
    assert [m.content for m in kept[:2]] == [
        history[0].content,
        HEADER.format(9) + "They talked about flights.",
    ]
    assert kept[2:] == history[-3:]


def test_apply_uses_a_plain_summarize_fn() -> None:
    seen: list[int] = []

    def summarize(messages: list[Message]) -> str:
        seen.append(len(messages))
        return "plain summary"

    kept = SummarizingManager(threshold=4, keep_recent=2, summarize_fn=summarize).apply(chat(6))
    assert seen == [4] and kept[0].content == HEADER.format(4) + "plain summary"


async def test_async_apply_uses_a_plain_summarize_fn_too() -> None:
    manager = SummarizingManager(threshold=4, keep_recent=2, summarize_fn=lambda m: "plain")
    kept = await manager.async_apply(chat(6))
    assert kept[0].content == HEADER.format(4) + "plain"


def test_apply_cannot_await_an_async_summarize_fn_and_summarizes_offline() -> None:
    recorder = Recorder()
    history = chat(6)
    kept = SummarizingManager(threshold=4, keep_recent=2, summarize_fn=recorder).apply(history)
    assert recorder.calls == []
    assert kept[0].content.startswith(HEADER.format(4) + "User: u0")


async def test_a_failing_summarize_fn_falls_back_to_the_offline_summary(
    caplog: pytest.LogCaptureFixture,
) -> None:
    echo = "the model echoed: my card is " + "4111 1111 1111 1111"

    async def broken(messages: list[Message]) -> str:
        raise RuntimeError(echo)

    manager = SummarizingManager(threshold=4, keep_recent=2, summarize_fn=broken)
    with caplog.at_level(logging.ERROR):
        kept = await manager.async_apply(chat(6))
    assert kept[0].content.startswith(HEADER.format(4) + "User: u0")
    assert "summarize_fn failed" in caplog.text and "RuntimeError (" in caplog.text
    assert echo not in caplog.text  # the error's text may quote the conversation
    assert "in broken" in caplog.text  # the frames stay


async def test_triggered_and_completed_events_carry_the_counts(events: EventLog) -> None:
    history = [system(), *chat(12)]
    manager = SummarizingManager(threshold=10, keep_recent=3, summarize_fn=Recorder())
    kept = await manager.async_apply(history)
    (triggered,) = events.named(TRIGGERED)
    (completed,) = events.named(COMPLETED)
    assert triggered == {"strategy": "summarizing", "messages_before": 12, "threshold": 10}
    assert completed["strategy"] == "summarizing"
    assert len(kept) == 1 + 1 + 3
    assert (completed["messages_before"], completed["messages_after"]) == (12, 5)
    assert completed["summarized_count"] == 9 and completed["duration_ms"] >= 0


def test_apply_emits_the_same_events(events: EventLog) -> None:
    SummarizingManager(threshold=4, keep_recent=2).apply(chat(6))
    assert [name for name, _ in events.events] == [TRIGGERED, COMPLETED]
    assert events.named(COMPLETED)[0]["summarized_count"] == 4


def test_recent_messages_never_start_with_results_of_a_summarized_call() -> None:
    history = [user("u0"), bot("a0"), user(TASK), call("c1", "c2"), result("c1"), result("c2")]
    kept = SummarizingManager(threshold=4, keep_recent=2, strategy="turns").apply(history)
    # keep_recent=2 would start at result c1: the call and its results stay together.
    assert texts(kept[1:]) == ["call:c1,c2", "result:c1", "result:c2"]
    assert kept[0].content.startswith(HEADER.format(3)) and orphans(kept) == []


def test_every_leading_system_message_is_kept_before_the_summary() -> None:
    memory = system("<memory>Flies from Lisbon.</memory>")
    history = [system(), memory, *chat(8)]
    kept = SummarizingManager(threshold=6, keep_recent=2, strategy="turns").apply(history)
    assert kept[:2] == history[:2] and is_summary(kept[2]) and kept[3:] == history[-2:]


def test_a_mid_run_system_note_is_history_not_a_new_system_prompt() -> None:
    note = system("Note: the user is now on mobile.")
    history = [system(), *chat(4), note, *chat(6)]
    seen: list[list[Message]] = []

    def summarize(messages: list[Message]) -> str:
        seen.append(messages)
        return "s"

    manager = SummarizingManager(
        threshold=8, keep_recent=3, summarize_fn=summarize, strategy="turns"
    )
    kept = manager.apply(history)
    assert kept[0] is history[0] and note in seen[0] and note not in kept


def test_without_preserve_system_system_messages_count_and_are_summarized() -> None:
    history = [system(), *chat(5)]
    kept = SummarizingManager(threshold=5, keep_recent=2, preserve_system=False).apply(history)
    assert kept[0].content.startswith(HEADER.format(4)) and kept[1:] == history[-2:]


async def test_a_saved_summary_is_folded_into_the_next_one() -> None:
    recorder = Recorder("first")
    manager = SummarizingManager(
        threshold=6, keep_recent=2, summarize_fn=recorder, strategy="turns"
    )
    first = await manager.async_apply([system(), *chat(8)])
    assert first[1].content == HEADER.format(6) + "first"

    recorder.text = "second"
    grown = [*first, *chat(12)[8:]]  # the saved window plus four new messages
    second = await manager.async_apply(grown)
    assert [is_summary(m) for m in second] == [False, True, False, False]
    assert second[0] is grown[0]
    assert second[1].content == HEADER.format(6 + 4) + "second"
    assert recorder.calls[1][0] is first[1]  # the earlier summary, to build on


def test_the_offline_summary_builds_on_a_saved_summary() -> None:
    manager = SummarizingManager(threshold=6, keep_recent=2, strategy="turns")
    first = manager.apply([system(), user("My budget is 200 EUR."), *chat(7)])
    second = manager.apply([*first, *chat(12)[8:]])
    assert "My budget is 200 EUR." in second[1].content
    assert second[1].content.startswith(HEADER.format(10))


def test_seed_strategy_puts_the_last_system_message_first_and_drops_the_others() -> None:
    """The seed's quoted loop: one system message survives, the last one, at any length."""
    first, note = system(), system("Note: the user is now on mobile.")
    short = [first, *chat(2), note, *chat(4)[2:]]
    assert SummarizingManager(threshold=6, keep_recent=2).apply(short) == [note, *chat(4)]
    history = [first, *chat(4), note, *chat(6)[4:]]
    kept = SummarizingManager(threshold=4, keep_recent=2).apply(history)
    assert kept[0] is note and kept[1].content.startswith(HEADER.format(4))
    assert kept[2:] == history[-2:] and first not in kept


def test_seed_strategy_cuts_exactly_keep_recent_messages() -> None:
    history = [user("u0"), bot("a0"), user(TASK), call("c1", "c2"), result("c1"), result("c2")]
    kept = SummarizingManager(threshold=4, keep_recent=2).apply(history)
    assert kept[0].content.startswith(HEADER.format(4)) and kept[1:] == history[-2:]


def test_an_unknown_strategy_is_refused() -> None:
    with pytest.raises(ConversationConfigError, match="strategy"):
        SummarizingManager(strategy="lossy")  # type: ignore[arg-type]

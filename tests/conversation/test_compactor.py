"""``LLMCompactor``: token budgets, protected head and tail, pruning, summaries.

Most tests count a message's words as its tokens (``token_counter=words``), so the
budgets can be worked out by hand; the default counters have tests of their own.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.conversation.history import (
    TASK,
    call,
    orphans,
    result,
    system,
    texts,
    unanswered,
    user,
)
from tests.support.events import EventLog
from tulip_memory.compactor import (
    MESSAGE_OVERHEAD_TOKENS,
    PRUNED_TOOL_OUTPUT,
    LLMCompactor,
    SummaryProvider,
    estimate_message_tokens,
)
from tulip_memory.conversation import ConversationConfigError, ConversationManager, is_summary
from tulip_memory.messages import Message, Role
from tulip_memory.summarize import Summary, fingerprint

TRIGGERED = "memory.compactor.triggered"
COMPLETED = "memory.compactor.completed"
HEADER = "[Summary of previous conversation ({} messages)]:\n"


def words(message: Message) -> int:
    return max(1, len(message.content.split()))


def sized(tag: str, count: int, role: Role = Role.USER) -> Message:
    """A message of ``count`` words, the first being ``tag``."""
    return Message(role=role, content=" ".join([tag] + ["w"] * (count - 1)))


def talk(count: int, size: int = 10, start: int = 0) -> list[Message]:
    """``count`` messages m<start>... of ``size`` words, alternating user and assistant."""
    roles = (Role.USER, Role.ASSISTANT)
    return [sized(f"m{i}", size, roles[i % 2]) for i in range(start, start + count)]


def tags(messages: list[Message]) -> list[str]:
    return [m.content.split()[0] if m.content else texts([m])[0] for m in messages]


SYSTEM = sized("system", 5, Role.SYSTEM)
#: 5 + 20 * 10 = 205 tokens: over the trigger (80) of a 100-token context.
LONG_CHAT = [SYSTEM, *talk(20)]


class Summarizer:
    """An async summarize_fn that records its calls and numbers its summaries."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[Message], str | None]] = []

    async def __call__(self, messages: list[Message], previous: str | None) -> str:
        self.calls.append((list(messages), previous))
        return f"S{len(self.calls)}"


def compactor(context_length: int = 100, **options: Any) -> LLMCompactor:
    return LLMCompactor(context_length, token_counter=words, **options)


# -- settings ------------------------------------------------------------------------


def test_defaults_are_the_documented_ones() -> None:
    c = LLMCompactor()
    assert isinstance(c, ConversationManager)
    assert (c.context_length, c.trigger_fraction, c.head_turns) == (128_000, 0.8, 2)
    assert (c.tail_token_fraction, c.summarize_fn, c.summary_provider) == (0.5, None, None)


@pytest.mark.parametrize(
    "options",
    [
        {"context_length": 0},
        {"trigger_fraction": 0.0},
        {"trigger_fraction": 1.5},
        {"head_turns": -1},
        {"tail_token_fraction": 0.0},
        {"tail_token_fraction": 1.0},
    ],
)
def test_invalid_settings_are_refused(options: dict[str, float]) -> None:
    with pytest.raises(ConversationConfigError):
        LLMCompactor(**options)  # type: ignore[arg-type]


async def test_the_documented_example_never_fires_in_a_short_thread(events: EventLog) -> None:
    summarizer = Summarizer()
    c = LLMCompactor(
        context_length=128_000,
        trigger_fraction=0.85,
        head_turns=2,
        tail_token_fraction=0.4,
        summarize_fn=summarizer,
    )
    history = [system(), *talk(40)]
    assert await c.async_apply(history) == history
    assert summarizer.calls == [] and events.events == []


# -- the trigger ---------------------------------------------------------------------


async def test_an_empty_history_stays_empty(events: EventLog) -> None:
    assert await compactor().async_apply([]) == [] and compactor().apply([]) == []
    assert events.events == []


async def test_it_fires_only_above_the_trigger(events: EventLog) -> None:
    at_trigger = talk(8)  # 80 tokens = 0.8 * 100
    assert await compactor().async_apply(at_trigger) == at_trigger
    assert events.events == []
    over = [*at_trigger, sized("one-more", 1)]
    assert await compactor().async_apply(over) != over
    assert len(events.named(TRIGGERED)) == 1


# -- head, tail and the middle -------------------------------------------------------


async def test_without_summarize_fn_the_middle_is_dropped(events: EventLog) -> None:
    kept = await compactor().async_apply(LONG_CHAT)
    # System prompt; the first two turns; the newest turns within 50 tokens.
    assert tags(kept) == ["system", "m0", "m1", "m15", "m16", "m17", "m18", "m19"]
    (completed,) = events.named(COMPLETED)
    assert completed["action"] == "dropped" and completed["removed_count"] == 13
    assert (completed["tokens_before"], completed["tokens_after"]) == (205, 75)


async def test_the_tail_is_budgeted_in_tokens_not_messages() -> None:
    history = [SYSTEM, *talk(4), *talk(10, size=2, start=4), sized("big", 45)]
    kept = await compactor().async_apply(history)
    # 45 + 2 + 2 = 49 tokens fit in the tail's 50; a third short message would not.
    assert tags(kept) == ["system", "m0", "m1", "m12", "m13", "big"]


async def test_the_last_turn_is_kept_even_over_the_tail_budget() -> None:
    history = [SYSTEM, *talk(6), sized("huge", 300)]
    kept = await compactor().async_apply(history)
    assert tags(kept) == ["system", "m0", "m1", "huge"]


async def test_head_turns_sets_how_many_opening_turns_are_kept() -> None:
    assert tags(await compactor(head_turns=0).async_apply(LONG_CHAT))[:2] == ["system", "m15"]
    assert tags(await compactor(head_turns=3).async_apply(LONG_CHAT))[:5] == [
        "system",
        "m0",
        "m1",
        "m2",
        "m15",
    ]


async def test_every_leading_system_message_is_protected() -> None:
    memory = sized("memory", 5, Role.SYSTEM)
    kept = await compactor().async_apply([SYSTEM, memory, *talk(20)])
    assert kept[:2] == [SYSTEM, memory] and tags(kept[2:4]) == ["m0", "m1"]


async def test_nothing_in_the_middle_means_nothing_to_drop(events: EventLog) -> None:
    history = [sized("system", 70, Role.SYSTEM), *talk(3)]  # 100 tokens, all protected
    assert await compactor().async_apply(history) == history
    (completed,) = events.named(COMPLETED)
    assert completed["action"] == "unchanged" and completed["removed_count"] == 0


# -- tool output ---------------------------------------------------------------------


def tool_round(i: int, output_words: int = 100, thought_words: int = 0) -> list[Message]:
    thought = " ".join(["thinking"] * thought_words)
    return [call(f"c{i}", text=thought), result(f"c{i}", " ".join([f"out{i}"] * output_words))]


def tool_history(rounds: int, thought_words: int = 0) -> list[Message]:
    loop = [m for i in range(rounds) for m in tool_round(i, thought_words=thought_words)]
    return [SYSTEM, sized("task", 10), sized("ack", 10, Role.ASSISTANT), *loop, *talk(2)]


async def test_stale_tool_output_is_pruned_first_and_can_be_enough(events: EventLog) -> None:
    history = tool_history(10)  # 1055 tokens, trigger 800, tail budget 500
    summarizer = Summarizer()
    kept = await compactor(1000, summarize_fn=summarizer).async_apply(history)
    assert len(kept) == len(history) and summarizer.calls == []
    pruned = [i for i, m in enumerate(kept) if m.content == PRUNED_TOOL_OUTPUT]
    # Results of rounds 0-5 (the middle) are pruned; 6-9 are in the protected tail.
    assert [kept[i].tool_call_id for i in pruned] == [f"c{i}" for i in range(6)]
    assert all(kept[i].name == "search" for i in pruned)
    assert kept[-6:] == history[-6:] and orphans(kept) == [] and unanswered(kept) == []
    (completed,) = events.named(COMPLETED)
    assert completed["action"] == "pruned" and completed["pruned_count"] == 6
    assert completed["tokens_after"] <= 800 < completed["tokens_before"]


async def test_when_pruning_is_not_enough_the_middle_goes() -> None:
    history = tool_history(10, thought_words=50)  # calls with long thoughts stay long
    kept = await compactor(600).async_apply(history)
    assert texts(kept[3:5]) == ["call:c9", "result:c9"]
    assert tags(kept) == ["system", "task", "ack", "thinking", "out9", "m0", "m1"]
    assert PRUNED_TOOL_OUTPUT not in [m.content for m in kept]


async def test_a_tool_call_is_never_split_from_its_results() -> None:
    loop: list[Message] = [sized("task", 10)]
    for i in range(12):
        ids = [f"c{i}.{j}" for j in range(1 + i % 3)]
        loop.append(call(*ids, text=" ".join(["plan"] * (5 + i))))
        loop += [result(one, " ".join(["data"] * (20 + 7 * j))) for j, one in enumerate(ids)]
    history = [SYSTEM, *loop, sized("final", 5, Role.ASSISTANT)]
    for context_length in range(40, 1200, 23):
        for head_turns in (0, 1, 2, 3):
            c = compactor(context_length, head_turns=head_turns, tail_token_fraction=0.3)
            kept = await c.async_apply(history)
            assert orphans(kept) == [], (context_length, head_turns)
            assert unanswered(kept) == [], (context_length, head_turns)


async def test_the_head_takes_a_first_answer_with_all_its_tool_results() -> None:
    history = [SYSTEM, user(TASK), call("a", "b"), result("a"), result("b"), *talk(30)]
    kept = await compactor(100).async_apply(history)
    assert texts(kept[1:5]) == [TASK, "call:a,b", "result:a", "result:b"]


# -- summaries -----------------------------------------------------------------------


async def test_summarize_fn_summarizes_the_middle(events: EventLog) -> None:
    summarizer = Summarizer()
    kept = await compactor(summarize_fn=summarizer).async_apply(LONG_CHAT)
    ((given, previous),) = summarizer.calls
    assert given == LONG_CHAT[3:16] and previous is None
    assert kept[0] is SYSTEM and kept[1].role == Role.SYSTEM and is_summary(kept[1])
    assert kept[1].content == HEADER.format(13) + "S1"
    assert tags(kept[2:]) == ["m0", "m1", "m15", "m16", "m17", "m18", "m19"]
    (completed,) = events.named(COMPLETED)
    assert completed["action"] == "summarized" and completed["summary_source"] == "summarize_fn"
    assert completed["summarized_count"] == 13 and completed["removed_count"] == 13


async def test_summaries_are_incremental() -> None:
    summarizer = Summarizer()
    c = compactor(summarize_fn=summarizer)
    await c.async_apply(LONG_CHAT)
    grown = [*LONG_CHAT, *talk(2, start=20)]
    kept = await c.async_apply(grown)
    # Only the two messages dropped since, with the summary of what went before.
    new, previous = summarizer.calls[1]
    assert tags(new) == ["m15", "m16"] and previous == "S1"
    assert kept[1].content == HEADER.format(15) + "S2"
    assert tags(kept[2:]) == ["m0", "m1", "m17", "m18", "m19", "m20", "m21"]


async def test_the_same_history_again_reuses_the_summary(events: EventLog) -> None:
    summarizer = Summarizer()
    c = compactor(summarize_fn=summarizer)
    first = await c.async_apply(LONG_CHAT)
    assert await c.async_apply(list(LONG_CHAT)) == first
    assert len(summarizer.calls) == 1
    assert events.named(COMPLETED)[1]["summary_source"] == "cached"


async def test_another_history_gets_a_summary_of_its_own() -> None:
    summarizer = Summarizer()
    c = compactor(summarize_fn=summarizer)
    await c.async_apply(LONG_CHAT)
    other = [SYSTEM, *[sized(f"other{i}", 10) for i in range(22)]]
    await c.async_apply(other)
    new, previous = summarizer.calls[1]
    assert previous is None and tags(new)[0] == "other2"


async def test_a_saved_compacted_history_extends_its_own_summary() -> None:
    summarizer = Summarizer()
    c = compactor(summarize_fn=summarizer)
    saved = await c.async_apply(LONG_CHAT)
    kept = await compactor(summarize_fn=summarizer).async_apply([*saved, *talk(2, start=20)])
    new, previous = summarizer.calls[1]
    assert tags(new) == ["m15", "m16"] and previous == "S1"
    assert [is_summary(m) for m in kept].count(True) == 1
    assert kept[1].content == HEADER.format(13 + 2) + "S2"
    assert tags(kept[2:]) == ["m0", "m1", "m17", "m18", "m19", "m20", "m21"]


async def test_a_failing_summarize_fn_drops_the_middle(caplog: pytest.LogCaptureFixture) -> None:
    echo = "the model echoed: my card is " + "4111 1111 1111 1111"

    async def broken(messages: list[Message], previous: str | None) -> str:
        raise RuntimeError(echo)

    with caplog.at_level(logging.ERROR):
        kept = await compactor(summarize_fn=broken).async_apply(LONG_CHAT)
    assert tags(kept) == ["system", "m0", "m1", "m15", "m16", "m17", "m18", "m19"]
    assert "summarize_fn failed" in caplog.text and "RuntimeError (" in caplog.text
    assert echo not in caplog.text  # the error's text may quote the conversation
    assert "in broken" in caplog.text  # the frames stay


def test_apply_cannot_await_and_drops_the_middle(events: EventLog) -> None:
    summarizer = Summarizer()
    kept = compactor(summarize_fn=summarizer).apply(LONG_CHAT)
    assert tags(kept) == ["system", "m0", "m1", "m15", "m16", "m17", "m18", "m19"]
    assert summarizer.calls == []
    assert [name for name, _ in events.events] == [TRIGGERED, COMPLETED]


async def test_apply_keeps_a_summary_that_still_covers_the_middle() -> None:
    c = compactor(summarize_fn=Summarizer())
    summarized = await c.async_apply(LONG_CHAT)
    assert c.apply(LONG_CHAT) == summarized
    grown = [*LONG_CHAT, *talk(2, start=20)]
    assert not any(is_summary(m) for m in c.apply(grown))  # S1 no longer covers it


# -- a summary computed in the background ----------------------------------------------


def background(history: list[Message], end: int, text: str = "BG") -> Summary:
    return Summary(text=text, end=end, fingerprint=fingerprint(history[:end]), model="bg-model")


def provider_of(summary: Summary | None) -> SummaryProvider:
    async def provide(messages: list[Message]) -> Summary | None:
        return summary

    return provide


async def test_a_background_summary_covering_the_middle_is_used(events: EventLog) -> None:
    summarizer = Summarizer()
    c = compactor(summarize_fn=summarizer, summary_provider=provider_of(background(LONG_CHAT, 16)))
    kept = await c.async_apply(LONG_CHAT)
    assert summarizer.calls == []
    assert kept[1].content == HEADER.format(16) + "BG"
    assert tags(kept[2:]) == ["m0", "m1", "m15", "m16", "m17", "m18", "m19"]
    assert events.named(COMPLETED)[0]["summary_source"] == "provider"


async def test_a_background_summary_reaching_into_the_tail_still_covers_the_middle() -> None:
    c = compactor(summary_provider=provider_of(background(LONG_CHAT, 19)))
    kept = await c.async_apply(LONG_CHAT)
    assert kept[1].content == HEADER.format(19) + "BG"


@pytest.mark.parametrize(
    "summary",
    [
        None,
        background(LONG_CHAT, 10),  # stale: stops before what would be dropped
        background([SYSTEM, *talk(20, size=9)], 16),  # another history
        background(LONG_CHAT, 30),  # beyond this history
    ],
    ids=["missing", "stale", "other-history", "too-long"],
)
async def test_a_missing_or_stale_background_summary_falls_back(summary: Summary | None) -> None:
    summarizer = Summarizer()
    kept = await compactor(
        summarize_fn=summarizer, summary_provider=provider_of(summary)
    ).async_apply(LONG_CHAT)
    ((given, previous),) = summarizer.calls
    assert given == LONG_CHAT[3:16] and previous is None
    assert kept[1].content == HEADER.format(13) + "S1"


async def test_without_summarize_fn_a_stale_background_summary_means_dropping() -> None:
    c = compactor(summary_provider=provider_of(background(LONG_CHAT, 10)))
    kept = await c.async_apply(LONG_CHAT)
    assert not any(is_summary(m) for m in kept)
    assert tags(kept) == ["system", "m0", "m1", "m15", "m16", "m17", "m18", "m19"]


async def test_a_failing_summary_provider_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(messages: list[Message]) -> Summary | None:
        raise ConnectionError("store down")

    summarizer = Summarizer()
    with caplog.at_level(logging.ERROR):
        kept = await compactor(summarize_fn=summarizer, summary_provider=broken).async_apply(
            LONG_CHAT
        )
    assert kept[1].content == HEADER.format(13) + "S1" and "summary_provider failed" in caplog.text


# -- events --------------------------------------------------------------------------


async def test_events_carry_tokens_and_counts(events: EventLog) -> None:
    kept = await compactor().async_apply(LONG_CHAT)
    (triggered,) = events.named(TRIGGERED)
    assert triggered == {
        "strategy": "llm_compactor",
        "messages_before": 21,
        "tokens_before": 205,
        "trigger_tokens": 80.0,
        "context_length": 100,
    }
    (completed,) = events.named(COMPLETED)
    assert completed["messages_after"] == len(kept) == 8
    assert completed["removed_count"] == 21 - 8 and completed["summarized_count"] == 0


# -- counting tokens -----------------------------------------------------------------


def test_the_estimate_is_four_characters_a_token_plus_overhead() -> None:
    message = Message(role=Role.USER, content="x" * 400)
    assert estimate_message_tokens(message) == 101 + MESSAGE_OVERHEAD_TOKENS
    assert LLMCompactor().count_tokens(message) == estimate_message_tokens(message)
    assert LLMCompactor(model="openai/not-a-known-model").count_tokens(message) == 105


def test_tool_calls_count_towards_the_tokens() -> None:
    plain = call("c1")
    heavy = Message(role=Role.ASSISTANT, tool_calls=[*plain.tool_calls, *call("c2").tool_calls])
    assert estimate_message_tokens(heavy) > estimate_message_tokens(plain) > 4


def test_a_known_model_is_counted_by_litellm() -> None:
    import litellm

    message = Message(role=Role.USER, content="hello " * 100)
    expected = litellm.token_counter(model="gpt-4o-mini", text=message.content)
    counted = LLMCompactor(model="gpt-4o-mini").count_tokens(message)
    assert counted == expected + MESSAGE_OVERHEAD_TOKENS
    assert counted != estimate_message_tokens(message)

"""``tulip_memory.summarize``: summaries, their coverage, and how they are written."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.conversation.history import TASK, agent_loop, bot, call, chat, result, system, user
from tests.support.openai_server import FakeOpenAI, Reply
from tulip_memory.errors import TulipMemoryError
from tulip_memory.summarize import (
    ELIDED,
    SummarizationError,
    Summary,
    SummaryFormatError,
    SummarySettings,
    SummarySettingsError,
    chunk_lines,
    extend_summary,
    extractive_summary,
    fingerprint,
    summarize_history,
)

CHAT = "/v1/chat/completions"
MODEL = "openai/summary-model"
WHEN = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
TRIP = [
    system(),
    user(f"Hello there. {TASK}"),
    bot("Searching now."),
    call("c1"),
    result("c1", "Three flights found. SK 1234 departs 07:10 and costs 149 EUR."),
    bot("The cheapest is SK 1234 at 149 EUR. Shall I book it?"),
    user("Yes, book it. Use my Visa card."),
]


def settings(fake: FakeOpenAI, **overrides: Any) -> SummarySettings:
    values: dict[str, Any] = {
        "api_base": fake.url,
        "api_key": "test",
        "timeout": 5.0,
        "max_retries": 2,
        "backoff": 0.01,
        "max_backoff": 1.0,
    }
    return SummarySettings(**{**values, **overrides})


def prompt_of(fake: FakeOpenAI, index: int = -1) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = fake.requests_to(CHAT)[index].json["messages"]
    return messages


# -- Summary and fingerprints ----------------------------------------------------------


def test_a_summary_round_trips_through_json() -> None:
    summary = Summary(text="S", start=2, end=7, fingerprint="abc", model=MODEL, created_at=WHEN)
    data = json.loads(json.dumps(summary.to_dict()))
    assert data["message_count"] == 5 and data["version"] == 1
    assert Summary.from_dict(data) == summary
    extractive = Summary(text="S", end=3, fingerprint="f", created_at=WHEN)
    assert Summary.from_dict(extractive.to_dict()) == extractive


@pytest.mark.parametrize(
    "change",
    [
        {"version": 2},
        {"end": "7"},
        {"start": 9},
        {"created_at": "not a date"},
        {"created_at": "2025-05-01T12:00:00"},  # no timezone
        {"model": 3},
        {"text": None},
    ],
)
def test_bad_summary_data_is_refused(change: dict[str, Any]) -> None:
    data = {**Summary(text="S", end=7, fingerprint="f", created_at=WHEN).to_dict(), **change}
    with pytest.raises(SummaryFormatError) as refused:
        Summary.from_dict(data)
    assert isinstance(refused.value, TulipMemoryError)


def test_a_missing_field_is_refused() -> None:
    data = Summary(text="S", end=7, fingerprint="f", created_at=WHEN).to_dict()
    del data["fingerprint"]
    with pytest.raises(SummaryFormatError):
        Summary.from_dict(data)


def test_fingerprints_chain() -> None:
    history = [system(), *chat(6)]
    assert fingerprint(history) == fingerprint(history[3:], fingerprint(history[:3]))
    assert fingerprint(history) != fingerprint([*history[:-1], bot("changed")])
    assert fingerprint([]) == ""


def test_a_summary_matches_only_the_history_it_covers() -> None:
    history = [system(), *chat(10)]
    summary = Summary(text="S", start=1, end=6, fingerprint=fingerprint(history[1:6]))
    assert summary.message_count == 5 and summary.matches(history)
    assert summary.covers(history, 2, 6) and summary.covers(history, 1, 3)
    assert not summary.covers(history, 0, 6) and not summary.covers(history, 2, 7)
    assert not summary.matches(history[:5])  # too short
    assert not summary.matches([system(), user("other"), *chat(9)])


# -- extractive summaries ----------------------------------------------------------------


def test_the_extractive_summary_keeps_the_informative_sentences() -> None:
    text = extractive_summary(None, TRIP)
    lines = text.splitlines()
    assert lines[0] == f"User: {TASK}"  # "Hello there." says nothing; the task does
    assert "Tool result search: SK 1234 departs 07:10 and costs 149 EUR." in lines
    assert "Assistant: The cheapest is SK 1234 at 149 EUR." in lines
    assert "Assistant: [called search]" in lines
    assert "You are a travel agent." not in text  # system messages are not turns
    assert extractive_summary(None, TRIP) == text  # deterministic


def test_the_extractive_summary_extends_the_previous_one() -> None:
    first = extractive_summary(None, TRIP[:3])
    assert extractive_summary(first, TRIP[3:]) == extractive_summary(None, TRIP)


def test_the_extractive_summary_stays_within_its_budget() -> None:
    loop = agent_loop(60)
    text = extractive_summary(None, loop, max_chars=300)
    lines = text.splitlines()
    assert len(text) <= 300
    assert lines[0] == f"User: {TASK}" and lines[1] == ELIDED
    assert lines[-1] == "Tool result search: result of c59"


def test_chunks_respect_the_token_budget() -> None:
    def count(line: str) -> int:
        return len(line.split())

    lines = ["a b c", "d e", "f g h i", "j", "k " * 20]
    chunks = chunk_lines(lines, 5, count)
    # The last line alone is over budget: it is cut (in halves) until it fits.
    assert chunks == [["a b c", "d e"], ["f g h i", "j"], ["k k k k k "]]


async def test_offline_extension_covers_the_new_turns() -> None:
    first = await extend_summary(None, TRIP[:4], model=None, now=WHEN)
    assert (first.start, first.end, first.model, first.created_at) == (0, 4, None, WHEN)
    assert first.matches(TRIP)
    second = await extend_summary(first, TRIP[4:], model=None)
    assert (second.start, second.end) == (0, len(TRIP)) and second.matches(TRIP)
    assert second.text == extractive_summary(None, TRIP)


async def test_summarize_history_extends_a_matching_summary_and_redoes_a_stale_one() -> None:
    history = [system(), *chat(10)]
    first = await summarize_history(history[:5], model=None)
    assert first.end == 5
    assert await summarize_history(history, first, model=None, end=5) is first
    extended = await summarize_history(history, first, model=None)
    assert extended.end == 11 and extended.matches(history)
    other = [system(), user("something else"), *chat(9)]
    redone = await summarize_history(other, first, model=None)
    assert redone.matches(other) and (redone.start, redone.end) == (0, len(other))
    assert redone.text == (await summarize_history(other, model=None)).text
    with pytest.raises(SummaryFormatError):
        await summarize_history(history, model=None, end=12)


# -- model summaries -----------------------------------------------------------------


async def test_a_model_extends_the_previous_summary(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply(content="  The user wants SK 1234 booked with Visa.  "))
    previous = Summary(
        text="The user asked for a flight.", end=3, fingerprint=fingerprint(TRIP[:3])
    )
    summary = await extend_summary(
        previous, TRIP[3:], model=MODEL, settings=settings(fake_openai), now=WHEN
    )
    assert summary.text == "The user wants SK 1234 booked with Visa."
    assert (summary.model, summary.end, summary.created_at) == (MODEL, len(TRIP), WHEN)
    assert summary.matches(TRIP)
    (request,) = fake_openai.requests_to(CHAT)
    assert request.json["model"] == "summary-model"
    system_prompt, prompt = prompt_of(fake_openai)
    assert system_prompt["role"] == "system" and "running summary" in system_prompt["content"]
    assert "Summary so far:\nThe user asked for a flight." in prompt["content"]
    assert "Use my Visa card." in prompt["content"] and "Searching now." not in prompt["content"]


async def test_a_first_model_summary_has_no_previous(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply(content="The user wants a flight."))
    summary = await extend_summary(None, TRIP, model=MODEL, settings=settings(fake_openai))
    assert summary.text == "The user wants a flight." and summary.message_count == len(TRIP)
    assert "Summary so far:\n(none yet)" in prompt_of(fake_openai)[1]["content"]


async def test_a_429_is_retried_after_retry_after(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(
        Reply(status=429, headers={"Retry-After": "0.3"}), Reply(content="Booked SK 1234.")
    )
    started = time.monotonic()
    summary = await extend_summary(None, TRIP, model=MODEL, settings=settings(fake_openai))
    assert time.monotonic() - started >= 0.3
    assert summary.text == "Booked SK 1234." and len(fake_openai.requests_to(CHAT)) == 2


async def test_a_500_every_time_is_a_clear_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.default_chat = lambda request: Reply(status=500, content="upstream down")
    with pytest.raises(SummarizationError) as failure:
        await extend_summary(None, TRIP, model=MODEL, settings=settings(fake_openai))
    error = failure.value
    assert isinstance(error, TulipMemoryError)
    assert (error.status, error.attempts) == (500, 3) and len(fake_openai.requests_to(CHAT)) == 3
    assert MODEL in str(error) and "after 3 attempt(s)" in str(error)


async def test_a_client_error_is_not_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply(status=400, content="bad request"))
    with pytest.raises(SummarizationError) as failure:
        await extend_summary(None, TRIP, model=MODEL, settings=settings(fake_openai))
    assert failure.value.status == 400 and failure.value.attempts == 1


async def test_an_empty_answer_is_an_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply(content="   "))
    with pytest.raises(SummarizationError, match="empty summary"):
        await extend_summary(None, TRIP, model=MODEL, settings=settings(fake_openai))


async def test_an_answer_far_longer_than_asked_is_an_error(fake_openai: FakeOpenAI) -> None:
    """A model (or a server) spewing text is no summary: it would ride in every
    compacted view and the next summary's prompt."""
    fake_openai.script_chat(Reply(content="word " * 2_000))
    with pytest.raises(SummarizationError, match="over 1,600 for 100 words"):
        await extend_summary(
            None, TRIP, model=MODEL, settings=settings(fake_openai, summary_words=100)
        )


async def test_long_new_turns_are_summarized_chunk_by_chunk(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(*[Reply(content=f"summary {i}") for i in range(1, 20)])
    turns = [user(f"Turn {i}: " + "words " * 60) for i in range(6)]
    summary = await extend_summary(
        None, turns, model=MODEL, settings=settings(fake_openai, max_input_tokens=150)
    )
    requests = fake_openai.requests_to(CHAT)
    assert len(requests) > 1 and summary.text == f"summary {len(requests)}"
    for i in range(1, len(requests)):
        assert f"Summary so far:\nsummary {i}\n" in prompt_of(fake_openai, i)[1]["content"]


async def test_nothing_new_to_read_makes_no_call(fake_openai: FakeOpenAI) -> None:
    previous = Summary(text="So far.", end=1, fingerprint=fingerprint(TRIP[:1]))
    summary = await extend_summary(
        previous, [system("note")], model=MODEL, settings=settings(fake_openai)
    )
    assert summary.text == "So far." and summary.end == 2 and fake_openai.requests == []


# -- settings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [{"timeout": 0}, {"max_retries": -1}, {"max_input_tokens": 0}, {"max_chars": 0}],
)
def test_bad_settings_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(SummarySettingsError):
        SummarySettings(**bad)


def test_importing_these_modules_does_not_import_litellm() -> None:
    code = (
        "import sys, tulip_memory.conversation, tulip_memory.compactor, tulip_memory.summarize;"
        "assert 'litellm' not in sys.modules, 'litellm imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("budget", [1, 2, 3, 10, 50])
def test_any_budget_is_respected(budget: int) -> None:
    assert len(extractive_summary("An earlier summary.", TRIP, max_chars=budget)) <= budget

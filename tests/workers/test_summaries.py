"""Background summaries: what is summarized, incrementally, at most one job per thread,
and how the request path uses the result."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import redis

from tests.producer.queues import with_db
from tests.support.openai_server import FakeOpenAI, Reply
from tests.support.pg import app_store
from tulip_memory.compactor import estimate_message_tokens
from tulip_memory.delta import DeltaCheckpointer, FileDeltaStorage, InMemoryObjectStorage
from tulip_memory.delta.tenants import tenant_checkpointer
from tulip_memory.messages import Message, Role, ToolCall
from tulip_memory.state import AgentState
from tulip_memory.summaries import SummaryBudget, SummaryStore, compacted_view, summary_range
from tulip_memory.summarize import SummarizationError
from tulip_producer import AsyncReader
from tulip_workers.summarizer import SummaryScheduler, SummaryTrigger, SummaryWorker

MODEL = "openai/summary-model"


def chat(turns: int, system: bool = True) -> list[Message]:
    msgs = [Message(role=Role.SYSTEM, content="You are a support agent.")] if system else []
    for i in range(turns):
        msgs += [
            Message(role=Role.USER, content=f"Question {i} about order {1000 + i}."),
            Message(role=Role.ASSISTANT, content=f"Answer {i}: order {1000 + i} ships soon."),
        ]
    return msgs


def test_summary_range_skips_anchor_and_tail_and_never_splits_a_tool_call() -> None:
    msgs = chat(10)
    r = summary_range(msgs, head_turns=2, keep_recent=4)
    assert (r.start, r.end) == (5, 17)  # system + 2 turns = 5; 21 - 4 = 17
    call = Message(role=Role.ASSISTANT, tool_calls=[ToolCall(id="c1", name="lookup")])
    result = Message(role=Role.TOOL, content="found", tool_call_id="c1")
    with_tool = [*msgs[:16], call, result, *msgs[16:]]
    r = summary_range(with_tool, head_turns=2, keep_recent=6)
    assert r.end == 16  # the cut would fall between the call and its result: moved before
    assert summary_range(chat(2), head_turns=2, keep_recent=4).empty
    assert summary_range([], head_turns=2, keep_recent=4).empty


@pytest.fixture
def checkpointer(tmp_path: Path) -> DeltaCheckpointer:
    return DeltaCheckpointer(FileDeltaStorage(tmp_path / "ckpt"))


T = "acme"  # thread state is per tenant


@pytest.fixture
def scheduler(redis_url: str) -> tuple[SummaryScheduler, list[tuple[str, str, str]]]:
    sent: list[tuple[str, str, str]] = []
    client = redis.Redis.from_url(with_db(redis_url, 9))
    return SummaryScheduler(client, lambda *job: sent.append(job)), sent


async def test_summaries_are_incremental_through_the_model(
    checkpointer: DeltaCheckpointer, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_BASE", fake_openai.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    fake_openai.default_chat = lambda request: Reply(content=f"SUMMARY-{len(fake_openai.requests)}")
    thread = f"t-{uuid.uuid4().hex}"
    worker = SummaryWorker(checkpointer=checkpointer, model=MODEL, keep_recent=4)
    await tenant_checkpointer(checkpointer, T).save(AgentState(messages=tuple(chat(12))), thread)
    assert await worker.run(T, thread) == "summarized"
    first = await SummaryStore(tenant_checkpointer(checkpointer, T).storage).get(thread)
    assert first is not None and (first.start, first.end) == (5, 21)
    assert await worker.run(T, thread) == "up to date"
    await tenant_checkpointer(checkpointer, T).save(AgentState(messages=tuple(chat(15))), thread)
    assert await worker.run(T, thread) == "summarized"
    second = await SummaryStore(tenant_checkpointer(checkpointer, T).storage).get(thread)
    assert second is not None and (second.start, second.end) == (5, 27)
    asked = json.dumps(fake_openai.requests_to("/v1/chat/completions")[-1].json)
    assert first.text in asked  # the previous summary is extended ...
    assert "Question 12 about" in asked and "Question 3 about" not in asked  # ... with new turns


async def test_a_failing_summarizer_leaves_the_thread_loadable_and_clears_the_job(
    checkpointer: DeltaCheckpointer,
    fake_openai: FakeOpenAI,
    scheduler: tuple[SummaryScheduler, list[tuple[str, str, str]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_BASE", fake_openai.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    fake_openai.default_chat = lambda request: Reply(status=500)
    sched, sent = scheduler
    thread = f"t-{uuid.uuid4().hex}"
    state = AgentState(messages=tuple(chat(12)))
    await tenant_checkpointer(checkpointer, T).save(state, thread)
    assert sched.maybe_schedule(T, thread) and not sched.maybe_schedule(T, thread)  # one pending
    [(tenant, named, token)] = sent
    assert (tenant, named) == (T, thread)
    worker = SummaryWorker(checkpointer=checkpointer, model=MODEL, scheduler=sched)
    worker_settings_fast(monkeypatch)
    with pytest.raises(SummarizationError):
        await worker.run(T, thread, token)
    assert await tenant_checkpointer(checkpointer, T).load(thread) == state
    assert await SummaryStore(tenant_checkpointer(checkpointer, T).storage).get(thread) is None
    assert sched.maybe_schedule(T, thread)  # the failed job no longer counts as pending


def worker_settings_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    import tulip_memory.summarize as summarize

    fast = summarize.SummarySettings(max_retries=1, backoff=0.01, max_backoff=0.02)
    monkeypatch.setattr(summarize, "SummarySettings", lambda: fast)


async def test_compacted_view_uses_a_matching_summary_and_never_a_stale_one(
    checkpointer: DeltaCheckpointer, pg_dsn: str
) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    msgs = chat(12)
    await tenant_checkpointer(checkpointer, T).save(AgentState(messages=tuple(msgs)), thread)
    worker = SummaryWorker(checkpointer=checkpointer, keep_recent=4)  # extractive, offline
    assert await worker.run(T, thread) == "summarized"
    store = app_store(pg_dsn)
    reader = AsyncReader(store, checkpointer=checkpointer)
    try:
        compacted = await reader.load(thread, view="compacted", tenant=T)
        assert compacted is not None
        assert [m.content for m in compacted.messages[:5]] == [m.content for m in msgs[:5]]
        assert compacted.messages[5].content.startswith(
            "[Summary of previous conversation (16 messages)]:"
        )
        assert list(compacted.messages[6:]) == msgs[21:]
        # History rewritten under the summary (an edit in the middle): no wrong window.
        edited = [*msgs[:8], Message(role=Role.USER, content="edited"), *msgs[9:]]
        await tenant_checkpointer(checkpointer, T).save(AgentState(messages=tuple(edited)), thread)
        fallback = await reader.load(thread, view="compacted", tenant=T)
        assert fallback is not None and list(fallback.messages) == edited  # under budget
        summary = await SummaryStore(tenant_checkpointer(checkpointer, T).storage).get(thread)
        assert compacted_view(edited, summary) is None
        with pytest.raises(ValueError, match="view must be"):
            await reader.load(thread, view="weird", tenant=T)  # type: ignore[arg-type]
    finally:
        await store.close()


async def test_summary_jobs_on_a_600_turn_thread_stay_within_the_step_rule(
    scheduler: tuple[SummaryScheduler, list[tuple[str, str, str]]],
) -> None:
    sched, sent = scheduler
    base = DeltaCheckpointer(InMemoryObjectStorage())
    checkpointer = tenant_checkpointer(base, T)
    summaries = SummaryStore(checkpointer.storage)
    budget = SummaryBudget(over_tokens=1500, step_tokens=375)  # short messages: ~12 tokens
    trigger = SummaryTrigger(budget, sched)
    worker = SummaryWorker(checkpointer=base, scheduler=sched, step_tokens=375)
    thread = f"t-{uuid.uuid4().hex}"
    msgs = chat(300)  # 600 turns after the system prompt
    most = max(estimate_message_tokens(m) for m in msgs)
    jobs = checkpoints = 0
    for n in range(2, len(msgs) + 1):
        messages = msgs[:n]
        await checkpointer.save(AgentState(messages=tuple(messages)), thread)
        checkpoints += 1
        before = budget.covered_end(messages, await summaries.get(thread))
        if await trigger.checkpointed(T, thread, messages, summaries):
            assert budget.due(messages, before)  # scheduled only when a step is due
            tenant, named, token = sent.pop()
            assert (tenant, named) == (T, thread)
            assert await worker.run(T, thread, token) == "summarized"
            jobs += 1
        summary = await summaries.get(thread)
        end = budget.covered_end(messages, summary)
        # Never lagging: what no summary covers stays under a step (plus one turn).
        assert budget.unsummarized(messages, end) < budget.step_tokens + most or (
            sum(estimate_message_tokens(m) for m in messages) <= budget.over_tokens
        )
        if summary is not None and n % 7 == 0:  # the compacted view between jobs
            view = compacted_view(messages, summary)
            assert view is not None and view[: summary.start] == messages[: summary.start]
            assert view[summary.start + 1 :] == messages[summary.end :]
    middle = sum(estimate_message_tokens(m) for m in msgs[5:-10])
    assert 10 <= jobs <= middle // budget.step_tokens + 1
    assert jobs / checkpoints <= 0.05
    assert not sched.pending(T, thread)


def test_the_budget_counts_only_what_a_job_would_add() -> None:
    budget = SummaryBudget(over_tokens=10, step_tokens=50, keep_recent=4)
    msgs = chat(40)
    wanted = budget.range(msgs)
    tokens = [estimate_message_tokens(m) for m in msgs]
    assert budget.unsummarized(msgs, None) == sum(tokens[wanted.start : wanted.end])
    assert budget.unsummarized(msgs, wanted.end) == 0 and not budget.due(msgs, wanted.end)
    assert budget.due(msgs, None)
    assert not SummaryBudget(over_tokens=10**6, step_tokens=1).due(msgs, None)  # under budget


async def test_a_job_checks_the_threshold_itself_and_a_replayed_one_does_nothing(
    checkpointer: DeltaCheckpointer,
    scheduler: tuple[SummaryScheduler, list[tuple[str, str, str]]],
) -> None:
    """Anyone who can write to the broker can send a job: one for a thread under the
    threshold writes nothing, and one whose token is not the pending job's (stale, or
    a captured job sent again) is skipped without clearing the pending job's marker."""
    sched, sent = scheduler
    threads = tenant_checkpointer(checkpointer, T)
    summaries = SummaryStore(threads.storage)
    worker = SummaryWorker(
        checkpointer=checkpointer, scheduler=sched, keep_recent=4, over_tokens=6000
    )
    small = f"t-{uuid.uuid4().hex}"
    await threads.save(AgentState(messages=tuple(chat(12))), small)  # ~200 tokens
    assert (await worker.run(T, small)).startswith("not due:")
    assert await summaries.get(small) is None
    big = f"t-{uuid.uuid4().hex}"
    await threads.save(AgentState(messages=tuple(chat(400))), big)
    assert sched.maybe_schedule(T, big)
    (_, _, token) = sent.pop()
    assert await worker.run(T, big, "0" * 32) == (
        "skipped: not the pending job of its thread (stale, or sent again)"
    )
    assert sched.pending(T, big) and await summaries.get(big) is None
    assert await worker.run(T, big, token) == "summarized"
    assert not sched.pending(T, big)
    assert sched.maybe_schedule(T, big)  # the next job is pending; the replay of the last
    assert (await worker.run(T, big, token)).startswith("skipped:")  # neither runs
    assert sched.pending(T, big)  # nor clears it

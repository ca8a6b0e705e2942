"""``LLMExtractor`` through real HTTP calls to the local fake OpenAI server, each test
through both model clients (:mod:`tulip_memory.chat`): the OpenAI SDK (``auto``: an
``openai/`` model with an API base) and litellm."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.events import EventLog
from tests.support.openai_server import FakeOpenAI, Reply
from tulip_memory.chat import CLIENTS, Client
from tulip_memory.extract import ExtractionError, LLMExtractor, LLMExtractorConfig
from tulip_memory.extract.prompt import OMITTED
from tulip_memory.manager import LLMMemoryManager, Memory, MemoryType
from tulip_memory.messages import Message, Role
from tulip_memory.model_calls import import_litellm
from tulip_memory.state import AgentState
from tulip_memory.store import BaseStore

CHAT = "/v1/chat/completions"
ANA = {"type": "user", "key": "name", "content": "The user's name is Ana.", "why": "She said so."}
TALK = [
    Message(role=Role.USER, content="Hi, my name is Ana."),
    Message(role=Role.ASSISTANT, content="Nice to meet you, Ana."),
]


_CLIENT: list[Client] = ["auto"]


@pytest.fixture(autouse=True, params=CLIENTS)
def client(request: pytest.FixtureRequest) -> Iterator[Client]:
    """Every test of this module once per model client."""
    _CLIENT[0] = request.param
    yield request.param
    _CLIENT[0] = "auto"


def config(fake: FakeOpenAI, **overrides: Any) -> LLMExtractorConfig:
    settings: dict[str, Any] = {
        "client": _CLIENT[0],
        "model": "openai/test-model",
        "api_base": fake.url,
        "api_key": "test",
        "timeout": 5.0,
        "max_retries": 2,
        "backoff": 0.01,
        "max_backoff": 1.0,
        "response_schema": False,
    }
    return LLMExtractorConfig(**{**settings, **overrides})


def answer(*items: Any) -> Reply:
    return Reply(content=json.dumps({"memories": list(items)}))


def prompt_of(fake: FakeOpenAI, index: int = -1) -> str:
    return str(fake.requests_to(CHAT)[index].json["messages"][-1]["content"])


async def test_good_output_gives_memories_and_usage(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(
        answer(ANA, {**ANA, "type": "project", "key": "launch", "content": "Launch is Friday."})
    )
    existing = [Memory(type=MemoryType.USER, key="city", content="The user lives in Lisbon.")]
    result = await LLMExtractor(config(fake_openai)).extract(TALK, existing=existing)

    assert [(m.type, m.key) for m in result.memories] == [
        (MemoryType.USER, "name"),
        (MemoryType.PROJECT, "launch"),
    ]
    assert result.memories[0].metadata == {
        "why": "She said so.",
        "source": "llm",
        "model": "openai/test-model",
    }
    assert result.dropped == ()
    assert result.usage.attempts == 1
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    assert result.usage.total_tokens == result.usage.prompt_tokens + result.usage.completion_tokens
    (request,) = fake_openai.requests_to(CHAT)
    assert request.json["model"] == "test-model"
    assert "response_format" not in request.json
    assert "my name is Ana" in prompt_of(fake_openai) and '"key": "city"' in prompt_of(fake_openai)


async def test_usage_carries_the_price_of_a_priced_model(fake_openai: FakeOpenAI) -> None:
    """The cost of the call (litellm's on its response, or the SDK reply's tokens at
    litellm's map's prices), equal to litellm pricing its tokens afresh."""
    fake_openai.script_chat(answer(ANA))
    result = await LLMExtractor(config(fake_openai, model="openai/gpt-4o-mini")).extract(TALK)
    usage = result.usage
    prompt, completion = import_litellm().cost_per_token(
        model="gpt-4o-mini",
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
    )
    assert usage.cost_usd is not None and usage.cost_usd > 0
    assert usage.cost_usd == pytest.approx(prompt + completion)


async def test_an_unpriced_model_has_no_cost(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(answer(ANA))
    result = await LLMExtractor(config(fake_openai)).extract(TALK)  # openai/test-model
    assert result.usage.cost_usd is None


async def test_json_schema_output_is_requested_where_supported(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(answer(ANA))
    await LLMExtractor(config(fake_openai, response_schema=True)).extract(TALK)
    response_format = fake_openai.requests_to(CHAT)[0].json["response_format"]
    assert response_format["type"] == "json_schema"
    assert "memories" in response_format["json_schema"]["schema"]["properties"]
    # Left to litellm, an unknown model gets no schema.
    fake_openai.script_chat(answer(ANA))
    await LLMExtractor(config(fake_openai, response_schema=None)).extract(TALK)
    assert "response_format" not in fake_openai.requests_to(CHAT)[1].json


async def test_output_wrapped_in_prose_and_fences(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(
        Reply(content=f"Here is what I found:\n```json\n{json.dumps([ANA])}\n```\nLet me know!")
    )
    result = await LLMExtractor(config(fake_openai)).extract(TALK)
    assert [m.key for m in result.memories] == ["name"]


async def test_invalid_items_are_dropped_with_reasons(
    fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    fake_openai.script_chat(
        answer(ANA, {"type": "gossip", "key": "k", "content": "c"}, {"type": "user", "key": "x"}, 7)
    )
    with caplog.at_level(logging.WARNING, logger="tulip_memory.extract.llm"):
        result = await LLMExtractor(config(fake_openai)).extract(TALK)
    assert [m.key for m in result.memories] == ["name"]
    assert [d.reason for d in result.dropped] == [
        "unknown type (a str of length 6)",
        "missing content",
        "not an object: int",
    ]
    assert "unknown type (a str of length 6)" in caplog.text
    assert "gossip" not in caplog.text  # a reason quotes none of the answer


async def test_an_empty_list_is_no_memories(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply(content="[]"))
    result = await LLMExtractor(config(fake_openai)).extract(TALK)
    assert result.memories == () and result.dropped == ()


async def test_nothing_to_read_makes_no_call(fake_openai: FakeOpenAI) -> None:
    only_system = [Message(role=Role.SYSTEM, content="You are helpful.")]
    result = await LLMExtractor(config(fake_openai)).extract(only_system)
    assert result.memories == () and fake_openai.requests == []


async def test_429_waits_for_retry_after_then_succeeds(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply(status=429, headers={"Retry-After": "0.3"}), answer(ANA))
    started = time.monotonic()
    result = await LLMExtractor(config(fake_openai)).extract(TALK)
    assert time.monotonic() - started >= 0.3
    assert [m.key for m in result.memories] == ["name"]
    assert result.usage.attempts == 2 and len(fake_openai.requests_to(CHAT)) == 2


async def test_a_retry_after_beyond_max_backoff_fails_without_waiting(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script_chat(Reply(status=429, headers={"Retry-After": "3600"}), answer(ANA))
    with pytest.raises(ExtractionError) as failure:
        await LLMExtractor(config(fake_openai)).extract(TALK)
    assert failure.value.status == 429 and failure.value.attempts == 1


async def test_a_timeout_is_retried_then_reported(fake_openai: FakeOpenAI) -> None:
    extractor = LLMExtractor(config(fake_openai, timeout=0.2, max_retries=1))
    # The loop's first call builds its model client inside the attempt's 0.2 s, which
    # on a slow host is spent before any request is sent: both timeouts must be the
    # server's, so the client is built by a call before them.
    fake_openai.script_chat(answer(ANA))
    await extractor.extract(TALK)
    fake_openai.reset()
    fake_openai.script_chat(Reply(content="[]", delay=2.0), Reply(content="[]", delay=2.0))
    with pytest.raises(ExtractionError) as failure:
        await extractor.extract(TALK)
    assert failure.value.attempts == 2
    assert len(fake_openai.requests_to(CHAT)) == 2


async def test_a_client_error_is_not_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_chat(Reply(status=400, content="bad request"))
    with pytest.raises(ExtractionError) as failure:
        await LLMExtractor(config(fake_openai)).extract(TALK)
    assert failure.value.status == 400 and len(fake_openai.requests_to(CHAT)) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"choices": "not a list", "usage": {"prompt_tokens": "many", "completion_tokens": -1}},
        {"choices": [{"message": {"content": ["not", "text"]}}], "usage": None},
        {"unexpected": True},
    ],
    ids=["choices-not-a-list", "content-not-text", "no-completion"],
)
async def test_a_reply_that_is_no_completion_fails_the_extraction(
    fake_openai: FakeOpenAI, body: dict[str, Any]
) -> None:
    """A server (or a gateway) answering 200 with a body that is no chat completion:
    an ExtractionError after bounded attempts, never a crash, a memory or a token count
    taken from garbage."""
    fake_openai.script_chat(*[Reply(body=body) for _ in range(3)])
    with pytest.raises(ExtractionError) as failure:
        await LLMExtractor(config(fake_openai)).extract(TALK)
    assert 1 <= failure.value.attempts <= 3
    assert len(fake_openai.requests_to(CHAT)) == failure.value.attempts


async def test_a_flood_of_garbage_text_is_no_memories(fake_openai: FakeOpenAI) -> None:
    """A model answering 2 MB of bytes that are no JSON (control characters, odd
    Unicode, a bracket every few characters): a bounded, reasoned failure (unbounded,
    the prose search took minutes on the event loop), nothing stored from it."""
    garbage = ('\x00\x1b[31m\ufffd\u202e{["' * 1000 + "}") * 200
    fake_openai.script_chat(Reply(content=garbage))
    with pytest.raises(ExtractionError) as failure:
        await LLMExtractor(config(fake_openai, max_retries=0)).extract(TALK)
    assert failure.value.attempts == 1
    assert len(failure.value.reason) < 10_000


async def test_the_transcript_is_trimmed_to_the_token_budget(fake_openai: FakeOpenAI) -> None:
    history = [
        Message(role=Role.USER, content=f"message number {i} " + "words " * 30) for i in range(40)
    ]
    fake_openai.script_chat(Reply(content="[]"))
    await LLMExtractor(config(fake_openai, max_transcript_tokens=200)).extract(history)
    prompt = prompt_of(fake_openai)
    assert OMITTED in prompt
    assert "message number 39 " in prompt and "message number 0 " not in prompt


def session(text: str, user_id: str) -> AgentState:
    return AgentState(
        messages=[Message(role=Role.USER, content=text)], metadata={"user_id": user_id}
    )


async def test_through_the_manager_model_output_never_picks_the_namespace(
    fake_openai: FakeOpenAI, store: BaseStore, tenant: str, events: EventLog
) -> None:
    manager = LLMMemoryManager(
        store, namespace_resolver=lambda run: (tenant, "users", str(run.metadata["user_id"]))
    )
    manager.extract_fn = LLMExtractor(config(fake_openai), existing=manager.retrieve)
    with manager.scoped((tenant, "users", "ana")):
        await manager.save([Memory(type=MemoryType.USER, key="city", content="Lives in Lisbon.")])
    other = f"{tenant}-other"
    fake_openai.script_chat(
        answer({**ANA, "namespace": [other, "users", "ana"], "tenant": other, "user_id": "bo"})
    )
    await manager.on_session_end(session("My name is Ana.", "ana"))

    assert '"key": "city"' in prompt_of(fake_openai)  # existing memories given, to update
    assert await store.list_keys((tenant, "users", "ana", "user")) == ["city", "name"]
    assert await store.list_keys((other, "users", "ana", "user")) == []
    assert await store.list_keys((tenant, "users", "bo", "user")) == []
    saved = await store.get((tenant, "users", "ana", "user"), "name")
    assert saved is not None
    assert set(saved["metadata"]) == {"why", "source", "model", "updated_at"}
    (done,) = events.named("memory.extractor.completed")
    assert done["memory_count"] == 1 and done["prompt_tokens"] > 0


async def test_a_500_every_time_is_emitted_and_the_run_goes_on(
    fake_openai: FakeOpenAI, store: BaseStore, tenant: str, events: EventLog
) -> None:
    fake_openai.default_chat = lambda request: Reply(status=500, content="upstream down")
    manager = LLMMemoryManager(store, namespace_prefix=(tenant, "users", "ana"))
    manager.extract_fn = LLMExtractor(config(fake_openai, max_retries=2), existing=manager.retrieve)
    await manager.on_session_end(session("My name is Ana.", "ana"))  # does not raise

    (failed,) = events.named("memory.manager.extract_failed")
    assert failed["error"] == "ExtractionError" and "after 3 attempt(s)" in failed["reason"]
    assert failed["namespace"] == [tenant, "users", "ana"]
    assert len(fake_openai.requests_to(CHAT)) == 3
    state = await manager.on_session_start(session("Hello again", "ana"))
    assert state.messages[-1].content == "Hello again"
    assert await manager.retrieve() == []


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        LLMExtractorConfig(model="")
    with pytest.raises(ValueError):
        LLMExtractorConfig(model="openai/x", timeout=0)


def test_importing_the_package_does_not_import_litellm() -> None:
    code = (
        "import sys, tulip_memory, tulip_memory.manager, tulip_memory.extract;"
        "assert 'litellm' not in sys.modules, 'litellm imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

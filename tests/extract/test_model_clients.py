"""Which model client a process loads: litellm imported off the event loop, and not
at all for an OpenAI-compatible server (:mod:`tulip_memory.chat`); each of those cases
runs in a fresh interpreter, whose imports are its own. And the bound on what the
SDK path reads of a reply."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator

import httpx2
import pytest

from tests.support.openai_server import FakeOpenAI, Reply
from tulip_memory.chat import Chat, ChatModel, Retries
from tulip_memory.errors import ModelCallError
from tulip_memory.sdk_http import MAX_REPLY_BYTES, ReplyTooLarge, bound

_LOOP_DURING_IMPORT = """
import asyncio, json, sys
from tests.support.openai_server import FakeOpenAI, Reply
from tulip_memory import model_calls
from tulip_memory.extract import LLMExtractor, LLMExtractorConfig
from tulip_memory.messages import Message, Role

async def main() -> None:
    seen = []  # what the loop saw while litellm was half imported (in sys.modules, not done)
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            if "litellm" in sys.modules and model_calls._module is None:
                seen.append(1)
            await asyncio.sleep(0.005)

    with FakeOpenAI() as fake:
        fake.script_chat(Reply(content=json.dumps({"memories": []})))
        config = LLMExtractorConfig(model="openai/test-model", api_base=fake.url,
                                    api_key="test", timeout=30.0, response_schema=False,
                                    client="litellm")
        ticker = asyncio.create_task(tick())
        await LLMExtractor(config).extract([Message(role=Role.USER, content="Hi, I'm Ana.")])
        done.set()
        await ticker
    print(len(seen))

asyncio.run(main())
"""


def test_the_first_extraction_imports_litellm_without_stalling_the_loop() -> None:
    """A process's first extraction imports litellm (seconds): on a worker thread, so
    every other event on the worker's loop goes on meanwhile (on the loop it would
    stop them all, and a loaded host takes tens of seconds over it)."""
    run = subprocess.run(
        [sys.executable, "-c", _LOOP_DURING_IMPORT], capture_output=True, text=True, timeout=180
    )
    assert run.returncode == 0, run.stderr
    assert int(run.stdout.strip().splitlines()[-1]) > 0, "the loop did not run during the import"


_WITHOUT_LITELLM = """
import asyncio, json, sys
from tests.support.openai_server import FakeOpenAI, Reply
from tulip_memory.extract import LLMExtractor, LLMExtractorConfig
from tulip_memory.messages import Message, Role

async def main() -> None:
    with FakeOpenAI() as fake:
        item = {"type": "user", "key": "name", "content": "The user's name is Ana."}
        fake.script_chat(Reply(content=json.dumps({"memories": [item]})))
        config = LLMExtractorConfig(model="openai/gpt-4o-mini", api_base=fake.url, api_key="t")
        result = await LLMExtractor(config).extract([Message(role=Role.USER, content="I'm Ana.")])
        schema = "response_format" in fake.requests[-1].json
    print(json.dumps([len(result.memories), result.usage.cost_usd, schema,
                      "litellm" in sys.modules]))

asyncio.run(main())
"""


def test_an_openai_compatible_server_is_called_without_importing_litellm() -> None:
    """``auto`` with an ``openai/`` model and an API base: the OpenAI SDK, priced and
    asked for a JSON schema from litellm's model map, in a process that never imports
    litellm (seconds and ~175 MB)."""
    run = subprocess.run(
        [sys.executable, "-c", _WITHOUT_LITELLM], capture_output=True, text=True, timeout=180
    )
    assert run.returncode == 0, run.stderr
    memories, cost, schema, imported = json.loads(run.stdout.strip().splitlines()[-1])
    assert memories == 1 and cost > 0 and schema is True
    assert imported is False


def test_sdk_clients_are_shared_within_a_loop_and_dropped_with_it() -> None:
    """Every Chat of a loop (a summary builds one per call) shares the loop's client of
    an API base and key; a closed loop's clients go at the next lookup."""
    import asyncio

    from tulip_memory import chat

    async def clients() -> tuple[object, object, object, object]:
        return (
            asyncio.get_running_loop(),
            chat.sdk_client("http://127.0.0.1:9/v1", "k"),
            chat.sdk_client("http://127.0.0.1:9/v1", "k"),
            chat.sdk_client("http://127.0.0.1:9/v1", "other"),
        )

    loop, first, again, other = asyncio.run(clients())
    assert first is again and other is not first
    _, later, _, _ = asyncio.run(clients())
    assert later is not first
    assert loop not in chat._clients


def _sdk_chat(url: str, timeout: float = 30.0) -> tuple[Chat, Retries]:
    chat = Chat(ChatModel(model="openai/test-model", api_base=url, api_key="test"))
    retries = Retries(timeout=timeout, max_retries=2, backoff=0.01, max_backoff=0.05)
    return chat, retries


def test_a_reply_body_over_the_bound_is_a_reasoned_failure_unread() -> None:
    """An OpenAI-compatible server answering 200 with a body over MAX_REPLY_BYTES: the
    call fails at once (not retried) with a reason, and the worker never holds the
    body whole; a reply just under the bound is read."""

    async def call(fake: FakeOpenAI, content: str) -> str:
        chat, retries = _sdk_chat(fake.url)
        fake.script_chat(Reply(content=content))
        reply = await chat.complete(
            [{"role": "user", "content": "hi"}], temperature=0.0, max_tokens=10,
            retries=retries, error=ModelCallError,
        )  # fmt: skip
        return reply.content

    with FakeOpenAI(keep_alive=True) as fake:
        assert asyncio.run(call(fake, "a" * (MAX_REPLY_BYTES - 4096))) == "a" * (
            MAX_REPLY_BYTES - 4096
        )
        fake.reset()
        with pytest.raises(ModelCallError) as failure:
            asyncio.run(call(fake, "a" * (MAX_REPLY_BYTES + 1)))
        assert "not read" in failure.value.reason and failure.value.attempts == 1
        assert len(fake.requests) == 1


def test_a_body_without_a_length_is_cut_at_the_bound() -> None:
    """A body streamed without Content-Length (chunked, or until the server closes)
    stops being read at the bound."""
    sent = []

    async def endless() -> AsyncIterator[bytes]:
        while True:
            sent.append(1)
            yield b"x" * 65536

    async def main() -> None:
        response = httpx2.Response(200, content=endless())
        await bound(response)
        with pytest.raises(ReplyTooLarge):
            await response.aread()
        assert response.is_closed

    asyncio.run(main())
    limit_chunks = MAX_REPLY_BYTES // 65536
    assert limit_chunks + 1 <= len(sent) <= limit_chunks + 2  # the bound, and the chunk past it


def _fails_at_once_unread(fake: FakeOpenAI, reply: Reply) -> str:
    """The reason of a call the server answers with ``reply``: one attempt only."""

    async def call() -> None:
        chat, retries = _sdk_chat(fake.url)
        fake.script_chat(reply, reply, reply)
        await chat.complete(
            [{"role": "user", "content": "hi"}], temperature=0.0, max_tokens=10,
            retries=retries, error=ModelCallError,
        )  # fmt: skip

    with pytest.raises(ModelCallError) as failure:
        asyncio.run(call())
    assert failure.value.attempts == 1 and len(fake.requests) == 1
    return failure.value.reason


def test_an_error_reply_over_the_bound_is_not_read_either() -> None:
    """A 500 (which the SDK reads whole to raise its status error, and which is
    otherwise retried) whose body passes MAX_REPLY_BYTES fails at once, unread; a
    small 500 is still an ordinary, retried status error."""
    with FakeOpenAI(keep_alive=True) as fake:
        reason = _fails_at_once_unread(fake, Reply(status=500, content="e" * MAX_REPLY_BYTES))
        assert "over 8,388,608" in reason and "not read" in reason
        fake.reset()
        chat, retries = _sdk_chat(fake.url)
        fake.script_chat(Reply(status=500, content="busy"), Reply(content="fine"))
        prompt = [{"role": "user", "content": "hi"}]
        call = chat.complete(
            prompt, temperature=0.0, max_tokens=10, retries=retries, error=ModelCallError
        )
        reply = asyncio.run(call)
        assert reply.content == "fine" and reply.usage.attempts == 2


def test_replies_are_asked_for_uncompressed_and_a_compressed_one_is_refused() -> None:
    """A small compressed body may decode to gigabytes: the client asks for replies as
    they are, and one that comes compressed anyway is refused before it is decoded."""
    with FakeOpenAI(keep_alive=True) as fake:
        reason = _fails_at_once_unread(
            fake, Reply(content="{}", headers={"Content-Encoding": "gzip"})
        )
        assert "compressed (gzip)" in reason
        assert fake.requests[0].headers["accept-encoding"] == "identity"

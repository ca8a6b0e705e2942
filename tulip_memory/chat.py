"""One chat completion with our retries: the model call extraction and summaries share.

Two clients speak to chat models:

- **the OpenAI SDK** for a model ``openai/<name>`` with an ``api_base``: an
  OpenAI-compatible server (vLLM, TGI, llama.cpp, Ollama, a gateway). litellm sends
  such a server the same request (its ``openai/`` provider forwards the parameters as
  given; for the ``o1``/``o3``/``o4``/``gpt-5`` families ``max_completion_tokens``
  instead of ``max_tokens`` and no temperature, as here), but spends about 9 ms of CPU
  per call around it (its logging object, cost lookup and response rebuilding) where
  the SDK's own request costs about 3 ms: a worker with 32 calls in flight spent about
  half its CPU there (``bench/concurrency.py``). The SDK sends the request (its
  auth, headers, timeouts and status errors); the reply is read here, as JSON, up to
  :data:`~tulip_memory.sdk_http.MAX_REPLY_BYTES`, as is every reply its client receives,
  errors included (:mod:`tulip_memory.sdk_http`: a broken or hostile server's body
  longer than that is a reasoned failure, never held whole), without the SDK's typed
  request transform and response models, about a fifth of its CPU a call. The price and
  the JSON-schema support come from litellm's own model map, read without importing
  litellm (:mod:`tulip_memory.model_map`): such a process never imports it (about 175 MB).
- **litellm** for every other model: one model string for any provider, priced from
  its cost map. ``client="litellm"`` sends OpenAI-compatible servers through it too.

Retries are always ours (no client is allowed any), so ``Retry-After`` is honoured and
the cross-worker in-flight bound holds per attempt (:mod:`tulip_memory.model_calls`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from tulip_memory import model_map
from tulip_memory.errors import ModelCallError
from tulip_memory.model_calls import (
    backoff_delay,
    estimate_tokens,
    import_litellm,
    import_litellm_async,
    is_retryable,
    retry_after_of,
    status_of,
)

logger = logging.getLogger(__name__)

Client = Literal["auto", "litellm"]
CLIENTS: tuple[Client, ...] = ("auto", "litellm")
#: The model prefix litellm gives OpenAI and OpenAI-compatible servers.
OPENAI_PREFIX = "openai/"
#: Model families that take ``max_completion_tokens`` (litellm maps it for them too).
_COMPLETION_TOKENS_FAMILIES = ("o1", "o3", "o4", "gpt-5")

Prompt = Sequence[dict[str, str]]

#: The OpenAI SDK's request header for a response it hands back unread (what its
#: ``with_streaming_response`` sets): the body is then read here.
_UNREAD = {"X-Stainless-Raw-Response": "stream"}


@dataclass(frozen=True, kw_only=True)
class ChatModel:
    """Which model to call, where, and through which client (``"auto"``: the OpenAI
    SDK for an ``openai/`` model with an ``api_base``, else litellm)."""

    model: str
    api_base: str | None = None
    api_key: str | None = None
    client: Client = "auto"

    def __post_init__(self) -> None:
        if self.client not in CLIENTS:
            raise ValueError(f"client must be one of {CLIENTS}, got {self.client!r}")

    @property
    def direct(self) -> bool:
        """Whether calls go through the OpenAI SDK rather than litellm."""
        return (
            self.client == "auto"
            and self.api_base is not None
            and self.model.startswith(OPENAI_PREFIX)
        )


@dataclass(frozen=True, kw_only=True)
class Retries:
    """A ``timeout`` per attempt, ``max_retries`` after the first, exponential
    ``backoff`` up to ``max_backoff`` (a ``Retry-After`` beyond it fails at once)."""

    timeout: float
    max_retries: int
    backoff: float
    max_backoff: float

    def delay(self, error: BaseException, attempt: int) -> float | None:
        """Seconds to wait before the next attempt, or ``None`` to give up."""
        if attempt > self.max_retries or not is_retryable(error):
            return None
        wait = retry_after_of(error)
        if wait is not None:
            return wait if wait <= self.max_backoff else None
        return backoff_delay(attempt, self.backoff, self.max_backoff, random.random())


@dataclass(frozen=True)
class Usage:
    """What a model call cost: its tokens, ``cost_usd`` (``None``: no price known for
    the model) and how many attempts it took."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None
    attempts: int = 0


@dataclass(frozen=True)
class Reply:
    """A model's answer and what it cost."""

    content: str
    usage: Usage = Usage()


@dataclass(frozen=True)
class _Call:
    """One request: the same for every attempt."""

    prompt: list[dict[str, str]]
    temperature: float
    max_tokens: int
    seconds: float
    response_format: dict[str, Any] | None


class Chat:
    """Chat completions of one :class:`ChatModel`."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self._schema: bool | None = None

    async def load(self) -> None:
        """Import litellm, or read the model's entry of its model map, now and off the
        event loop (seconds, or tens of milliseconds)."""
        if self.model.direct:
            await asyncio.to_thread(model_map.model_entry, self.model.model)
        else:
            await import_litellm_async()

    def supports_schema(self) -> bool:
        """Whether the model takes a JSON-schema ``response_format`` (litellm's model
        map says; a self-hosted model is not in it), asked once."""
        if self._schema is None:
            if self.model.direct:
                self._schema = model_map.supports_response_schema(self.model.model)
            else:
                self._schema = _litellm_supports_schema(self.model.model)
        return self._schema

    def count_tokens(self, text: str) -> int:
        """``text``'s tokens for this model: litellm's tokenizer where it knows the
        model, else about four characters a token."""
        if self.model.direct:
            return estimate_tokens(text)
        try:
            return int(import_litellm().token_counter(model=self.model.model, text=text))
        except Exception:
            return estimate_tokens(text)

    async def complete(
        self,
        prompt: Prompt,
        *,
        temperature: float,
        max_tokens: int,
        retries: Retries,
        error: type[ModelCallError],
        what: str = "call",
        response_format: dict[str, Any] | None = None,
    ) -> Reply:
        """The model's reply to ``prompt``, retried by ``retries``; a failure for good
        raises ``error`` (its reason names the model and ``what`` failed)."""
        call = _Call(list(prompt), temperature, max_tokens, retries.timeout, response_format)
        attempt = 0
        while True:
            attempt += 1
            try:
                async with asyncio.timeout(retries.timeout):
                    reply = await self._once(call)
                return replace(reply, usage=replace(reply.usage, attempts=attempt))
            except Exception as e:
                delay = retries.delay(e, attempt)
                if delay is None:
                    raise error(
                        f"{self.model.model} {what} failed: {type(e).__name__}: {e}",
                        attempts=attempt,
                        status=status_of(e),
                    ) from e
                # The class and status only: a provider's error text may echo the prompt.
                logger.warning(
                    "%s %s failed (%s, status %s); retry in %.2fs",
                    self.model.model,
                    what,
                    type(e).__name__,
                    status_of(e),
                    delay,
                )
                await asyncio.sleep(delay)

    async def _once(self, call: _Call) -> Reply:
        if self.model.direct:
            return await self._sdk_call(call)
        return await self._litellm_call(call)

    async def _sdk_call(self, call: _Call) -> Reply:
        name = self.model.model.removeprefix(OPENAI_PREFIX)
        body: dict[str, Any] = {"model": name, "messages": call.prompt}
        if name.startswith(_COMPLETION_TOKENS_FAMILIES):
            body["max_completion_tokens"] = call.max_tokens
        else:
            body["max_tokens"] = call.max_tokens
            body["temperature"] = call.temperature
        if call.response_format is not None:
            body["response_format"] = call.response_format
        reply = _reply_of_json(await self._post(body, call.seconds))
        used = reply.usage
        cost = model_map.price(self.model.model, used.prompt_tokens, used.completion_tokens)
        return replace(reply, usage=replace(used, cost_usd=cost))

    async def _litellm_call(self, call: _Call) -> Reply:
        litellm = await import_litellm_async()
        kwargs: dict[str, Any] = {
            "model": self.model.model,
            "messages": call.prompt,
            "temperature": call.temperature,
            "max_tokens": call.max_tokens,
            "timeout": call.seconds,
            "num_retries": 0,
            "max_retries": 0,
        }
        if self.model.api_base is not None:
            kwargs["api_base"] = self.model.api_base
        if self.model.api_key is not None:
            kwargs["api_key"] = self.model.api_key
        if call.response_format is not None:
            kwargs["response_format"] = call.response_format
        response = await litellm.acompletion(**kwargs)
        return _reply_of(response, cost=_litellm_cost(litellm, response))

    def _client(self) -> Any:
        return sdk_client(self.model.api_base, self.model.api_key)

    async def _post(self, body: dict[str, Any], seconds: float) -> Any:
        """``POST /chat/completions`` through the SDK, its reply parsed from at most
        :data:`~tulip_memory.sdk_http.MAX_REPLY_BYTES` of body (the client's bound)."""
        import httpx2  # the OpenAI SDK's HTTP client

        response = await self._client().post(
            "/chat/completions",
            body=body,
            cast_to=httpx2.Response,
            options={"headers": _UNREAD, "timeout": seconds},
        )
        try:
            return json.loads(await response.aread())
        finally:
            await response.aclose()


#: The OpenAI SDK's clients of each event loop (their connections belong to one loop),
#: by API base and key, shared by every :class:`Chat` of the loop. A closed loop's go
#: at the next lookup (their connections hold the loop, so weak keys would not).
_clients: dict[asyncio.AbstractEventLoop, dict[tuple[str | None, str], Any]] = {}
_clients_lock = threading.Lock()  # loops of other threads look up too


def sdk_client(api_base: str | None, api_key: str | None) -> Any:
    """The running loop's OpenAI SDK client for ``api_base`` and ``api_key``."""
    key = api_key or os.environ.get("OPENAI_API_KEY") or "unused"  # the SDK insists
    with _clients_lock:
        for closed in [loop for loop in _clients if loop.is_closed()]:
            del _clients[closed]
        of_loop = _clients.setdefault(asyncio.get_running_loop(), {})
        client = of_loop.get((api_base, key))
        if client is None:
            import openai

            from tulip_memory import sdk_http

            client = openai.AsyncOpenAI(
                base_url=api_base,
                api_key=key,
                max_retries=0,
                default_headers=sdk_http.HEADERS,
                http_client=sdk_http.client(),
            )
            of_loop[(api_base, key)] = client
        return client


def _litellm_supports_schema(model: str) -> bool:
    try:
        return bool(import_litellm().supports_response_schema(model=model))
    except Exception:
        return False


def _reply_of(response: Any, *, cost: float | None) -> Reply:
    usage = getattr(response, "usage", None)
    tokens = Usage(
        prompt_tokens=_count(usage, "prompt_tokens"),
        completion_tokens=_count(usage, "completion_tokens"),
        total_tokens=_count(usage, "total_tokens"),
        cost_usd=cost,
    )
    return Reply(_content_of(response), tokens)


def _reply_of_json(data: Any) -> Reply:
    """A chat completion's content and tokens from its JSON (anything else: no content,
    no tokens)."""
    completion = data if isinstance(data, dict) else {}
    usage = completion.get("usage")
    used = usage if isinstance(usage, dict) else {}
    tokens = Usage(
        prompt_tokens=_int(used.get("prompt_tokens")),
        completion_tokens=_int(used.get("completion_tokens")),
        total_tokens=_int(used.get("total_tokens")),
    )
    content = None
    choices = completion.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            content = message.get("content")
    return Reply(content if isinstance(content, str) else "", tokens)


def _int(value: Any) -> int:
    """A token count as a provider's reply states it; anything but a count is 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _count(usage: Any, name: str) -> int:
    return _int(getattr(usage, name, 0))


def _content_of(response: Any) -> str:
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _litellm_cost(litellm: Any, response: Any) -> float | None:
    """The call's cost: what litellm already priced on the response
    (``_hidden_params["response_cost"]``, documented; ``None`` there is a model litellm
    has no price for, not worth a second try), else priced here."""
    hidden = getattr(response, "_hidden_params", None)
    if isinstance(hidden, dict) and "response_cost" in hidden:
        priced = hidden["response_cost"]
        if isinstance(priced, int | float) and not isinstance(priced, bool):
            return float(priced)
        return None
    try:
        return float(litellm.completion_cost(completion_response=response))
    except Exception:
        return None

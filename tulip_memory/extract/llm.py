"""``LLMExtractor``: memories extracted by a model through litellm.

One call per extraction: the transcript (trimmed to a token budget) and the
namespace's existing memories go in, a JSON list of memories comes out (a JSON schema
``response_format`` where the provider supports one), parsed tolerantly and checked
item by item. 429s, 5xx and timeouts are retried with backoff, never before a
``Retry-After``. Usage and cost come back in the :class:`ExtractionResult`.

Wire it into a manager whose memories it should update::

    manager = LLMMemoryManager(store, extract_mode="background")
    manager.extract_fn = LLMExtractor(LLMExtractorConfig(model=...), existing=manager.retrieve)

litellm is imported on first use, never when ``tulip_memory`` is imported.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tulip_memory.errors import ModelCallError
from tulip_memory.events import EV_MEMORY_EXTRACTOR_COMPLETED, emit
from tulip_memory.extract.parse import DroppedItem, parse_items, validate_items
from tulip_memory.extract.prompt import (
    build_prompt,
    render_transcript,
    response_format,
    trim_transcript,
)
from tulip_memory.manager.memory import Memory
from tulip_memory.messages import Message
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

ExistingFn = Callable[[], Awaitable[Sequence[Memory]]]
_RETRY_STATUSES = frozenset({408, 409, 429})


class ExtractionError(ModelCallError):
    """A model extraction that failed for good."""


@dataclass(frozen=True, kw_only=True)
class LLMExtractorConfig:
    """How to call the extraction model.

    ``response_schema``: ``None`` asks litellm whether the model supports JSON-schema
    output. A ``Retry-After`` longer than ``max_backoff`` is not waited for: the call
    fails instead.
    """

    model: str
    api_base: str | None = None
    api_key: str | None = None
    timeout: float = 30.0
    max_retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_transcript_tokens: int = 6_000
    max_existing: int = 50
    max_output_tokens: int = 1_024
    temperature: float = 0.0
    min_confidence: float = 0.0
    response_schema: bool | None = None

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("model must be a litellm model string, e.g. 'openai/gpt-4o-mini'")
        if self.timeout <= 0 or self.max_retries < 0 or self.max_transcript_tokens < 1:
            raise ValueError("timeout and max_transcript_tokens must be positive, max_retries >= 0")


@dataclass(frozen=True)
class Usage:
    """What one extraction cost; ``cost_usd`` is ``None`` when litellm cannot price it."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float | None = None
    attempts: int = 0


@dataclass(frozen=True)
class ExtractionResult:
    """Memories extracted, items dropped (with reasons), and usage."""

    memories: tuple[Memory, ...] = ()
    dropped: tuple[DroppedItem, ...] = ()
    usage: Usage = Usage()


class LLMExtractor:
    """An ``extract_fn`` for :class:`~tulip_memory.manager.LLMMemoryManager` backed by
    a litellm model; ``existing`` reads the memories the model should update."""

    def __init__(self, config: LLMExtractorConfig, *, existing: ExistingFn | None = None) -> None:
        self.config = config
        self.existing = existing

    async def __call__(self, messages: list[Message]) -> list[Memory]:
        """The ``ExtractFn`` contract: memories only; usage is emitted as an event."""
        known = list(await self.existing()) if self.existing is not None else []
        result = await self.extract(messages, existing=known)
        await emit(
            EV_MEMORY_EXTRACTOR_COMPLETED,
            model=self.config.model,
            memory_count=len(result.memories),
            dropped_count=len(result.dropped),
            prompt_tokens=result.usage.prompt_tokens,
            completion_tokens=result.usage.completion_tokens,
            cost_usd=result.usage.cost_usd,
            attempts=result.usage.attempts,
        )
        return list(result.memories)

    async def extract(
        self, messages: Sequence[Message], *, existing: Sequence[Memory] = ()
    ) -> ExtractionResult:
        """Extract memories from ``messages``; raises :class:`ExtractionError`."""
        litellm = await import_litellm_async()
        lines = trim_transcript(
            render_transcript(messages), self.config.max_transcript_tokens, self._count
        )
        if not lines:
            return ExtractionResult()
        prompt = build_prompt(lines, existing[: self.config.max_existing])
        response, attempts = await self._complete(litellm, prompt)
        parsed = parse_items(_content_of(response))
        if parsed.error is not None:
            raise ExtractionError(parsed.error, attempts=attempts)
        memories, dropped = validate_items(parsed.items, min_confidence=self.config.min_confidence)
        for item in dropped:
            logger.warning("dropped a memory item from %s: %s", self.config.model, item.reason)
        tagged = tuple(self._tag(m) for m in memories)
        return ExtractionResult(tagged, tuple(dropped), _usage(litellm, response, attempts))

    async def _complete(self, litellm: Any, prompt: list[dict[str, str]]) -> tuple[Any, int]:
        kwargs = self._request(litellm, prompt)
        attempt = 0
        while True:
            attempt += 1
            try:
                async with asyncio.timeout(self.config.timeout):
                    return await litellm.acompletion(**kwargs), attempt
            except Exception as e:
                delay = self._retry_delay(e, attempt)
                if delay is None:
                    raise ExtractionError(
                        f"{self.config.model} call failed: {type(e).__name__}: {e}",
                        attempts=attempt,
                        status=status_of(e),
                    ) from e
                logger.warning(
                    "%s call failed (%s: %s); retry in %.2fs",
                    self.config.model,
                    type(e).__name__,
                    e,
                    delay,
                )
                await asyncio.sleep(delay)

    def _request(self, litellm: Any, prompt: list[dict[str, str]]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.config.model,
            "messages": prompt,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_output_tokens,
            "timeout": self.config.timeout,
            # Retries are ours (they honour Retry-After); none inside litellm or the SDK.
            "num_retries": 0,
            "max_retries": 0,
        }
        if self.config.api_base is not None:
            kwargs["api_base"] = self.config.api_base
        if self.config.api_key is not None:
            kwargs["api_key"] = self.config.api_key
        if self._use_schema(litellm):
            kwargs["response_format"] = response_format()
        return kwargs

    def _use_schema(self, litellm: Any) -> bool:
        if self.config.response_schema is not None:
            return self.config.response_schema
        try:
            return bool(litellm.supports_response_schema(model=self.config.model))
        except Exception:
            return False

    def _retry_delay(self, error: Exception, attempt: int) -> float | None:
        """Seconds to wait before the next attempt, or ``None`` to give up."""
        if attempt > self.config.max_retries or not is_retryable(error):
            return None
        wait = retry_after_of(error)
        if wait is not None:
            return wait if wait <= self.config.max_backoff else None
        jitter = random.random()
        return backoff_delay(attempt, self.config.backoff, self.config.max_backoff, jitter)

    def _count(self, text: str) -> int:
        try:
            return int(import_litellm().token_counter(model=self.config.model, text=text))
        except Exception:
            return estimate_tokens(text)

    def _tag(self, memory: Memory) -> Memory:
        metadata = {**memory.metadata, "source": "llm", "model": self.config.model}
        return replace(memory, metadata=metadata)


def _content_of(response: Any) -> str:
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _usage(litellm: Any, response: Any, attempts: int) -> Usage:
    usage = getattr(response, "usage", None)
    return Usage(
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        total_tokens=int(getattr(usage, "total_tokens", 0) or 0),
        cost_usd=_cost(litellm, response),
        attempts=attempts,
    )


def _cost(litellm: Any, response: Any) -> float | None:
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

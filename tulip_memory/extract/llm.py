"""``LLMExtractor``: memories extracted by a model (:mod:`tulip_memory.chat`).

One call per extraction: the transcript (trimmed to a token budget) and the
namespace's existing memories go in, a JSON list of memories comes out (a JSON schema
``response_format`` where the provider supports one), parsed tolerantly and checked
item by item. 429s, 5xx and timeouts are retried with backoff, never before a
``Retry-After``. Usage and cost come back in the :class:`ExtractionResult`.

Wire it into a manager whose memories it should update::

    manager = LLMMemoryManager(store, extract_mode="background")
    manager.extract_fn = LLMExtractor(LLMExtractorConfig(model=...), existing=manager.retrieve)

The model client (litellm, or the OpenAI SDK for an OpenAI-compatible server) is
imported on first use, never when ``tulip_memory`` is imported.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from tulip_memory.chat import Chat, ChatModel, Client, Retries, Usage
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

logger = logging.getLogger(__name__)

ExistingFn = Callable[[], Awaitable[Sequence[Memory]]]


class ExtractionError(ModelCallError):
    """A model extraction that failed for good."""


class UnusableAnswer(ExtractionError):
    """The model answered, but nothing in the answer can be read as memories. Asking
    again would pay for another answer to the same prompt, so it is not retried
    (``permanent``)."""

    permanent = True


@dataclass(frozen=True, kw_only=True)
class LLMExtractorConfig:
    """How to call the extraction model.

    ``response_schema``: ``None`` asks litellm whether the model supports JSON-schema
    output (a self-hosted ``openai/`` model with an ``api_base`` is not asked: no). A
    ``Retry-After`` longer than ``max_backoff`` is not waited for: the call fails
    instead. ``client``: see :class:`tulip_memory.chat.ChatModel`.
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
    client: Client = "auto"

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("model must be a litellm model string, e.g. 'openai/gpt-4o-mini'")
        if self.timeout <= 0 or self.max_retries < 0 or self.max_transcript_tokens < 1:
            raise ValueError("timeout and max_transcript_tokens must be positive, max_retries >= 0")

    @property
    def chat_model(self) -> ChatModel:
        """The model and client calls go to."""
        return ChatModel(
            model=self.model, api_base=self.api_base, api_key=self.api_key, client=self.client
        )


@dataclass(frozen=True)
class ExtractionResult:
    """Memories extracted, items dropped (with reasons), and usage."""

    memories: tuple[Memory, ...] = ()
    dropped: tuple[DroppedItem, ...] = ()
    usage: Usage = field(default_factory=Usage)


class LLMExtractor:
    """An ``extract_fn`` for :class:`~tulip_memory.manager.LLMMemoryManager` backed by
    a model (:mod:`tulip_memory.chat`); ``existing`` reads the memories the model
    should update."""

    def __init__(self, config: LLMExtractorConfig, *, existing: ExistingFn | None = None) -> None:
        self.config = config
        self.existing = existing
        self.chat = Chat(config.chat_model)
        self._retries = Retries(
            timeout=config.timeout,
            max_retries=config.max_retries,
            backoff=config.backoff,
            max_backoff=config.max_backoff,
        )

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
        await self.chat.load()
        lines = trim_transcript(
            render_transcript(messages), self.config.max_transcript_tokens, self.chat.count_tokens
        )
        if not lines:
            return ExtractionResult()
        prompt = build_prompt(lines, existing[: self.config.max_existing])
        reply = await self.chat.complete(
            prompt,
            temperature=self.config.temperature,
            max_tokens=self.config.max_output_tokens,
            retries=self._retries,
            error=ExtractionError,
            response_format=response_format() if self._use_schema() else None,
        )
        parsed = parse_items(reply.content)
        if parsed.error is not None:
            raise UnusableAnswer(parsed.error, attempts=reply.usage.attempts)
        memories, dropped = validate_items(parsed.items, min_confidence=self.config.min_confidence)
        for item in dropped:  # reasons quote no text of the answer
            what = "a field of a memory item" if item.field else "a memory item"
            logger.warning("dropped %s from %s: %s", what, self.config.model, item.reason)
        tagged = tuple(self._tag(m) for m in memories)
        return ExtractionResult(tagged, tuple(dropped), reply.usage)

    def _use_schema(self) -> bool:
        if self.config.response_schema is not None:
            return self.config.response_schema
        return self.chat.supports_schema()

    def _tag(self, memory: Memory) -> Memory:
        metadata = {**memory.metadata, "source": "llm", "model": self.config.model}
        return replace(memory, metadata=metadata)

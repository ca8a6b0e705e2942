"""Provider embeddings through litellm: batching, bounded concurrency, retries.

Any litellm model string works ("openai/text-embedding-3-small", "voyage/voyage-3",
"openai/<name>" with ``api_base`` for an OpenAI-compatible server, ...).

Dimension: pass ``dimension`` when you know it. Without it the width is learned from
the first response (the first batch goes out alone, before any concurrent ones);
:meth:`LiteLLMEmbedder.resolve_dimension` forces that with a one-text probe call, and
reading :attr:`LiteLLMEmbedder.dimension` before either raises :class:`EmbeddingError`.

Retries are ours alone: 408/409/429/5xx, timeouts and connection errors are retried
with exponential backoff and jitter, never sooner than the provider's ``Retry-After``
(or ``retry-after-ms``). litellm exposes those headers on
``error.litellm_response_headers``; ``error.response.headers`` is empty for errors
coming through the OpenAI SDK. litellm is asked for ``max_retries=0``, but for the
"openai" provider it turns 0 into its default of 2 (``max_retries or DEFAULT``,
BerriAI/litellm#7003) and writes that onto whatever client it uses, so for that
provider we hand it an OpenAI SDK client pinned at one attempt. Other providers that
wrap an SDK with its own retries may still retry underneath us.

Vectors travel base64-encoded from the "openai" provider (OpenAI, and OpenAI-compatible
servers at an ``api_base``), unless ``extra`` names another ``encoding_format``. Asked
for nothing, litellm posts without an ``encoding_format``, the server answers lists of
floats, and the OpenAI SDK builds its response model number by number: 3 s of CPU for
512 texts of 384 dimensions, 60 times the 50 ms a fast model server takes to answer
(``bench/reindex.py --stub-ms 50``); base64 costs a tenth of that. A server that ignores
the parameter and sends floats is read all the same.

litellm is imported on first use, in a worker thread: importing it takes seconds and
``import tulip_memory.embeddings`` must stay cheap and offline.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import random
import weakref
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from tulip_memory.embeddings.base import BaseEmbedding, Vectors
from tulip_memory.errors import EmbeddingError
from tulip_memory.model_calls import (
    backoff_delay,
    import_litellm_async,
    is_retryable,
    retry_after_of,
)

PROVIDER_MAX_BATCH = 2048
MAX_RETRY_AFTER = 120.0
_PROBE_TEXT = "dimension probe"


class LiteLLMEmbedder(BaseEmbedding):
    """Embeds through ``litellm.aembedding`` in requests of at most ``max_batch`` texts.

    One :meth:`aembed` call keeps at most ``concurrency`` requests in flight (the bound
    is per call, not per embedder). ``max_retries`` counts retries after the first
    attempt of each request; the backoff before retry ``n`` (from 0) is drawn from
    ``[b/2, b]`` with ``b = min(backoff_max, backoff_base * 2**n)``, raised to the
    provider's Retry-After when that is longer (capped at :data:`MAX_RETRY_AFTER`).
    """

    def __init__(
        self,
        model: str,
        *,
        dimension: int | None = None,
        api_base: str | None = None,
        api_key: str | None = None,
        max_batch: int = PROVIDER_MAX_BATCH,
        concurrency: int = 2,
        timeout: float = 30.0,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        request_dimensions: bool = False,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        _validate(model, dimension, max_batch, concurrency, max_retries, request_dimensions)
        self._name = model
        self._dimension = dimension
        self.api_base = api_base
        self.api_key = api_key
        self.max_batch = max_batch
        self.concurrency = concurrency
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.request_dimensions = request_dimensions
        self.extra = dict(extra or {})
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            raise EmbeddingError(
                f"dimension of {self._name!r} is not known yet: pass dimension=..., "
                "or await resolve_dimension() / embed something first"
            )
        return self._dimension

    @property
    def model(self) -> str:
        """The litellm model string; with ``request_dimensions`` the width too (cache keys)."""
        if self.request_dimensions:
            return f"{self._name}[dimensions={self._dimension}]"
        return self._name

    async def resolve_dimension(self) -> int:
        """The vector width, learned by one probe request if nobody has said it yet."""
        if self._dimension is None:
            await self._embed_batch([_PROBE_TEXT])
        return self.dimension

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        texts = list(texts)
        if not texts:
            return np.zeros((0, await self.resolve_dimension()), dtype=np.float32)
        batches = [texts[i : i + self.max_batch] for i in range(0, len(texts), self.max_batch)]
        first: list[Vectors] = []
        if self._dimension is None:
            first.append(await self._embed_batch(batches.pop(0)))
        rest = await self._embed_batches(batches)
        return self.check(np.concatenate([*first, *rest]), len(texts))

    async def aclose(self) -> None:
        """Close the HTTP client this embedder opened on the running loop, if any."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

    # -- one batch ---------------------------------------------------------------------

    async def _embed_batches(self, batches: list[list[str]]) -> list[Vectors]:
        """All batches, ``concurrency`` at a time, in order; one failure cancels the rest."""
        if len(batches) <= 1 or self.concurrency == 1:
            return [await self._embed_batch(batch) for batch in batches]
        gate = asyncio.Semaphore(self.concurrency)

        async def gated(batch: list[str]) -> Vectors:
            async with gate:
                return await self._embed_batch(batch)

        tasks = [asyncio.create_task(gated(batch)) for batch in batches]
        try:
            return list(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _embed_batch(self, batch: list[str]) -> Vectors:
        response = await self._call_with_retries(batch)
        vectors = response_matrix(response, len(batch), self._name)
        if self._dimension is None:
            self._dimension = int(vectors.shape[1])
        return self.check(vectors, len(batch))

    async def _call_with_retries(self, batch: list[str]) -> Any:
        litellm = await import_litellm_async()
        request = self._request(litellm, batch)  # a missing API key raises here, untried
        for attempt in range(self.max_retries + 1):
            try:
                return await litellm.aembedding(**request)
            except Exception as e:
                if not is_retryable(e) or attempt == self.max_retries:
                    raise EmbeddingError(
                        f"embedding with {self._name!r} failed after {attempt + 1} "
                        f"attempt(s): {type(e).__name__}: {e}"
                    ) from e
                await asyncio.sleep(self._delay(attempt, e))
        raise AssertionError("unreachable")  # pragma: no cover

    def _request(self, litellm: ModuleType, batch: list[str]) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            **self.extra,
            "model": self._name,
            "input": batch,
            "timeout": self.timeout,
            "max_retries": 0,
        }
        if self.api_base is not None:
            kwargs["api_base"] = self.api_base
        if self.api_key is not None:
            kwargs["api_key"] = self.api_key
        if self.request_dimensions:
            # litellm rejects ``dimensions`` for "openai/*" models not named text-embedding-3*
            # (e.g. any OpenAI-compatible server) unless it is explicitly let through.
            kwargs["dimensions"] = self._dimension
            kwargs["allowed_openai_params"] = ["dimensions"]
        client = self._single_attempt_client(litellm)
        if client is not None:  # the "openai" provider: see the module's docstring
            kwargs["client"] = client
            kwargs.setdefault("encoding_format", "base64")
        return kwargs

    def _delay(self, attempt: int, error: BaseException) -> float:
        """Equal-jitter exponential backoff, but never less than the provider's Retry-After."""
        delay = backoff_delay(attempt + 1, self.backoff_base, self.backoff_max, random.random())
        hinted = retry_after_of(error)
        if hinted is not None:
            delay = max(delay, min(hinted, MAX_RETRY_AFTER))
        return delay

    def _single_attempt_client(self, litellm: ModuleType) -> Any | None:
        """For the "openai" provider, this loop's SDK client that never retries by itself."""
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            self._clients[loop] = _openai_client(litellm, self._name, self.api_base, self.api_key)
        return self._clients[loop]


# -- helpers -------------------------------------------------------------------------------


def _validate(
    model: str,
    dimension: int | None,
    max_batch: int,
    concurrency: int,
    max_retries: int,
    request_dimensions: bool,
) -> None:
    if not model:
        raise ValueError("model must be a non-empty litellm model string")
    if dimension is not None and dimension < 1:
        raise ValueError(f"dimension must be >= 1, got {dimension}")
    if max_batch < 1 or concurrency < 1 or max_retries < 0:
        raise ValueError(
            f"need max_batch >= 1, concurrency >= 1, max_retries >= 0; "
            f"got {max_batch}, {concurrency}, {max_retries}"
        )
    if request_dimensions and dimension is None:
        raise ValueError("request_dimensions=True needs an explicit dimension")


def response_matrix(response: Any, count: int, model: str) -> Vectors:
    """An embedding response's vectors as one float32 matrix, rows in input order."""
    data = getattr(response, "data", None)
    if not isinstance(data, list) or len(data) != count:
        got = len(data) if isinstance(data, list) else type(data).__name__
        raise EmbeddingError(f"{model} returned {got} embeddings for {count} inputs")
    rows = sorted(data, key=lambda item: _field(item, "index") or 0)
    try:
        vectors = np.asarray([_vector(_field(item, "embedding")) for item in rows])
        vectors = vectors.astype(np.float32).reshape(count, -1)
    except (TypeError, ValueError) as e:
        raise EmbeddingError(f"{model} returned malformed embeddings: {e}") from e
    if vectors.shape[1] == 0:
        raise EmbeddingError(f"{model} returned empty embeddings")
    return vectors


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def _vector(value: Any) -> Any:
    """A list of floats as is; an ``encoding_format="base64"`` string decoded."""
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4")
    if not isinstance(value, list) or not value:
        raise ValueError(f"an embedding must be a non-empty list of numbers, got {value!r:.60}")
    return value


def _openai_client(
    litellm: ModuleType, model: str, api_base: str | None, api_key: str | None
) -> Any | None:
    """An OpenAI SDK client pinned at one attempt, when litellm would use the OpenAI SDK.

    Mirrors litellm's own resolution of base URL and key for the "openai" provider;
    without a key it raises :class:`EmbeddingError` at once, with no retries.
    """
    try:
        _, provider, dynamic_key, dynamic_base = litellm.get_llm_provider(
            model=model, api_base=api_base
        )
    except Exception:
        return None  # litellm raises the same error, as EmbeddingError, on the call itself
    if provider != "openai":
        return None
    key = (
        api_key
        or dynamic_key
        or litellm.api_key
        or litellm.openai_key
        or os.environ.get("OPENAI_API_KEY")
    )
    if not key:  # the SDK would refuse every attempt; litellm reports it as a 500
        raise EmbeddingError(
            f"OPENAI_API_KEY is not set: {model!r} (provider 'openai') needs an API key, "
            "also for an OpenAI-compatible server at an api_base (any value it accepts)"
        )
    base = (
        dynamic_base
        or litellm.api_base
        or os.environ.get("OPENAI_BASE_URL")
        or os.environ.get("OPENAI_API_BASE")
        or "https://api.openai.com/v1"
    )
    return _single_attempt_openai_class()(api_key=key, base_url=base, max_retries=0)


@functools.cache
def _single_attempt_openai_class() -> type[Any]:
    import openai

    class SingleAttemptAsyncOpenAI(openai.AsyncOpenAI):
        """``max_retries`` stays 0 whatever litellm writes onto it."""

        @property
        def max_retries(self) -> int:
            return 0

        @max_retries.setter
        def max_retries(self, value: int) -> None:
            """Ignored: litellm sets ``max_retries or 2``; retries are the embedder's job."""

    return SingleAttemptAsyncOpenAI

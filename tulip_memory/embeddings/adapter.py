"""Any embedder the seed accepts, as a :class:`BaseEmbedding`.

The seed's stores take any ``tulip.rag.embeddings.base.BaseEmbedding``: something with
an integer ``dimension`` and ``embed(text)`` (a coroutine or a plain function) that
returns the text's vector. A batch method is used when present: ``aembed(texts)`` (the
``EmbeddingBackend`` of the turn store) or ``embed_batch(texts)``. Nothing more is
required. The stores here also need a stable model name (it keys the query cache and
names the vector slot a table's vectors belong to), so :func:`as_embedder` takes the
embedder's ``model`` (or ``model_name``) when it has one and otherwise derives a label
from its class and width, e.g. ``embedder:acme.vectors.Encoder/384``: the same in every
process, so a restart finds its own vectors again. Two different models of one class
and width should therefore carry a ``model`` attribute.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from tulip_memory.embeddings.base import BaseEmbedding, Vectors
from tulip_memory.errors import EmbeddingError

#: Texts embedded at once by an embedder that has no ``embed_batch``.
CONCURRENT_EMBEDS = 8


@runtime_checkable
class SeedEmbedder(Protocol):
    """The seed's embedder contract: a width and ``embed`` of one text."""

    @property
    def dimension(self) -> int: ...

    def embed(self, *args: Any, **kwargs: Any) -> Any: ...


#: What the stores accept as ``embedder=``.
EmbedderLike = BaseEmbedding | SeedEmbedder


def as_embedder(embedder: object) -> BaseEmbedding:
    """``embedder`` itself if it is a :class:`BaseEmbedding`, else an adapter onto it.

    Raises :class:`TypeError` when it has no positive integer ``dimension`` or no
    callable ``embed``, naming what is missing, at construction rather than at the
    first write.
    """
    if isinstance(embedder, BaseEmbedding):
        return embedder
    dimension = getattr(embedder, "dimension", None)
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
        raise TypeError(
            f"embedder {type(embedder).__name__} needs a positive int `dimension`, "
            f"got {dimension!r}"
        )
    if not callable(getattr(embedder, "embed", None)):
        raise TypeError(f"embedder {type(embedder).__name__} has no callable `embed`")
    return SeedEmbedding(embedder, dimension)


def label_of(embedder: object, dimension: int) -> str:
    """The embedder's own model name, or a label derived from its class and width."""
    for attribute in ("model", "model_name"):
        name = getattr(embedder, attribute, None)
        if isinstance(name, str) and name.strip():
            return name
    cls = type(embedder)
    return f"embedder:{cls.__module__}.{cls.__qualname__}/{dimension}"


class SeedEmbedding(BaseEmbedding):
    """A seed-style embedder behind the batch contract of :class:`BaseEmbedding`."""

    def __init__(self, inner: Any, dimension: int) -> None:
        self.inner = inner
        self._dimension = dimension
        self._model = label_of(inner, dimension)

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def model(self) -> str:
        return self._model

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        batch = getattr(self.inner, "aembed", None) or getattr(self.inner, "embed_batch", None)
        if callable(batch):
            rows = await _call(batch, list(texts))
        else:
            rows = await self._one_by_one(texts)
        try:
            vectors = np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)
        except (TypeError, ValueError) as e:
            raise EmbeddingError(f"{self._model} returned no vectors of numbers: {e}") from e
        return self.check(vectors, len(texts))

    async def _one_by_one(self, texts: Sequence[str]) -> list[Any]:
        embed = self.inner.embed
        bound = asyncio.Semaphore(CONCURRENT_EMBEDS)

        async def one(text: str) -> Any:
            async with bound:
                return await _call(embed, text)

        return list(await asyncio.gather(*(one(t) for t in texts)))


async def _call(fn: Any, argument: Any) -> Any:
    """``fn(argument)``: awaited when a coroutine function, in a thread when blocking."""
    if inspect.iscoroutinefunction(fn):
        return await fn(argument)
    result = await asyncio.to_thread(fn, argument)
    return await result if inspect.isawaitable(result) else result

"""A LangGraph store's ``index`` config as this project's embedders, and what an item is
searched by.

``{"dims": 1536, "embed": "openai:text-embedding-3-small"}`` names a model as LangGraph
does (``provider:model``); it becomes the project's embedder of that model
(:func:`~tulip_memory.embeddings.embedder_from_config`: ``hashing``/``local:`` models
run in process, any other goes through litellm as ``provider/model``). A LangChain
``Embeddings`` object, or a function of a list of texts, is used as it is. ``fields``
(default: the whole value) and a put's ``index=`` pick the text an item is found by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.store.base import IndexConfig
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path

from tulip_memory.embeddings import BaseEmbedding, embedder_from_config
from tulip_memory.store.validation import Indexed

#: Models the project runs itself; any other ``provider:model`` goes to litellm.
OWN_SCHEMES = ("hashing", "local")


class LangChainEmbedder:
    """LangChain ``Embeddings`` as the seed's embedder (``dimension``, ``embed``, and
    ``aembed`` of a batch)."""

    def __init__(self, embeddings: Any, dimension: int) -> None:
        self.embeddings = embeddings
        self.dimension = dimension
        self.model = getattr(embeddings, "model", None) or type(embeddings).__qualname__

    def embed(self, text: str) -> list[float]:
        return list(self.embeddings.embed_query(text))

    async def aembed(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(v) for v in await self.embeddings.aembed_documents(list(texts))]


def embedder_of(index: IndexConfig) -> BaseEmbedding | LangChainEmbedder:
    """The embedder an ``index`` config names."""
    dims = index.get("dims")
    if not isinstance(dims, int) or dims < 1:
        raise ValueError(f"index needs 'dims', a positive int, got {dims!r}")
    embed = index.get("embed")
    if isinstance(embed, str):
        scheme, sep, rest = embed.partition(":")
        spec = embed if not sep or scheme in OWN_SCHEMES else f"{scheme}/{rest}"
        return embedder_from_config(spec, dimension=dims)
    if embed is None:
        raise ValueError("index needs 'embed': a model name, Embeddings or a function")
    return LangChainEmbedder(ensure_embeddings(embed), dims)


def searchable(
    value: Mapping[str, Any], index: Sequence[str] | bool | None, fields: Sequence[str] | None
) -> Any:
    """What to store for ``value``: itself (searched by all its text) or
    :class:`~tulip_memory.store.validation.Indexed` with the text of the fields a put's
    ``index`` (else the store's ``fields``) names; ``index=False``: found by no query."""
    if index is False:
        return Indexed(dict(value), "")
    paths = index if isinstance(index, Sequence) and not isinstance(index, str) else fields
    if not paths or list(paths) == ["$"]:
        return dict(value)
    texts = [t for path in paths for t in get_text_at_path(value, path)]
    return Indexed(dict(value), " ".join(texts))

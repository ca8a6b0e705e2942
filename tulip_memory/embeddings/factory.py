"""Pick an embedder from one model string, so configuration is a single env var.

==========================  ==============================================
``None`` / ``""``           ``HashingEmbedder(dimension or 384)``, offline
``"hashing"``               ``HashingEmbedder(dimension or 384)``
``"hashing:256"``           ``HashingEmbedder(256)``
``"local"``                 ``SentenceTransformerEmbedder()`` (all-MiniLM-L6-v2)
``"local:<name or path>"``  ``SentenceTransformerEmbedder(<name or path>)``
anything else               ``LiteLLMEmbedder(model, dimension, api_base)``
==========================  ==============================================

A litellm model string is checked with ``litellm.get_llm_provider`` here, so a typo
fails at start-up; that imports litellm (seconds, once per process). A local model
computes with ``TULIP_EMBED_THREADS`` threads when that is set (the process's share of
the host's cores).
"""

from __future__ import annotations

from collections.abc import Mapping

from tulip_memory.embeddings.base import BaseEmbedding
from tulip_memory.embeddings.hashing import HashingEmbedder
from tulip_memory.embeddings.litellm_embedder import LiteLLMEmbedder
from tulip_memory.env import EMBED_API_BASE, EMBED_DIM, EMBED_MODEL, EMBED_THREADS
from tulip_memory.env import environ as environ_of
from tulip_memory.model_calls import import_litellm

DEFAULT_HASHING_DIMENSION = 384


def embedder_from_config(
    model: str | None,
    *,
    dimension: int | None = None,
    api_base: str | None = None,
) -> BaseEmbedding:
    """The embedder ``model`` names; see the module table. Invalid values raise ValueError."""
    if dimension is not None and dimension < 1:
        raise ValueError(f"embedding dimension must be >= 1, got {dimension}")
    spec = (model or "").strip()
    scheme, _, argument = spec.partition(":")
    if not spec or scheme == "hashing":
        return _hashing(argument, dimension, spec)
    if scheme == "local":
        return _local(argument.strip(), dimension)
    _check_routable(spec, api_base)
    return LiteLLMEmbedder(spec, dimension=dimension, api_base=api_base)


def spec_of(embedder: BaseEmbedding) -> tuple[str, str | None] | None:
    """The model string (and API base) :func:`embedder_from_config` builds an embedder
    like ``embedder`` from; ``None`` for one built otherwise (HRR, custom classes)."""
    if type(embedder) is HashingEmbedder:
        return f"hashing:{embedder.dimension}", None
    if type(embedder) is LiteLLMEmbedder and not embedder.request_dimensions:
        return embedder.model, embedder.api_base
    if type(embedder).__module__ == "tulip_memory.embeddings.local":
        return f"local:{embedder.model}", None
    return None


def embedder_from_env(environ: Mapping[str, str] | None = None) -> BaseEmbedding:
    """:func:`embedder_from_config` from ``TULIP_EMBED_MODEL``, ``_DIM`` and ``_API_BASE``."""
    env = environ_of(environ)
    return embedder_from_config(
        EMBED_MODEL.read(env),
        dimension=EMBED_DIM.read(env),
        api_base=EMBED_API_BASE.read(env),
    )


def _check_routable(model: str, api_base: str | None) -> None:
    """Fail at configuration time, not on the first embed, when litellm cannot route ``model``.

    Imports litellm (a few seconds, once per process).
    """
    if any(c.isspace() for c in model):
        raise ValueError(f"invalid embedding model {model!r}: no whitespace allowed")
    litellm = import_litellm()
    try:
        litellm.get_llm_provider(model=model, api_base=api_base)
    except Exception as e:
        raise ValueError(
            f"unknown embedding model {model!r}: litellm cannot tell its provider; "
            "use 'provider/model' (e.g. 'openai/text-embedding-3-small'), 'hashing' or 'local'"
        ) from e


def _hashing(argument: str, dimension: int | None, spec: str) -> HashingEmbedder:
    if not argument:
        return HashingEmbedder(dimension or DEFAULT_HASHING_DIMENSION)
    try:
        width = int(argument)
    except ValueError:
        raise ValueError(f"invalid embedding model {spec!r}: expected hashing:<int>") from None
    if width < 1:
        raise ValueError(f"invalid embedding model {spec!r}: the width must be >= 1")
    if dimension is not None and dimension != width:
        raise ValueError(f"{spec!r} contradicts dimension={dimension}")
    return HashingEmbedder(width)


def _local(name: str, dimension: int | None) -> BaseEmbedding:
    from tulip_memory.embeddings.local import DEFAULT_MODEL, SentenceTransformerEmbedder

    # The process's share of the host's cores is the host's setting, not the model's.
    embedder = SentenceTransformerEmbedder(name or DEFAULT_MODEL, threads=EMBED_THREADS.read())
    if dimension is not None and dimension != embedder.dimension:
        raise ValueError(
            f"{embedder.model!r} produces {embedder.dimension}-wide vectors, "
            f"not the configured {dimension}"
        )
    return embedder

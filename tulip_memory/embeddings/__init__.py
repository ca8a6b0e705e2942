"""Embedders: the contract, offline encoders, a litellm-backed one, and the query cache.

Importing this package stays cheap and offline: litellm and sentence-transformers are
imported only when an embedder that needs them is used or built.
"""

from tulip_memory.embeddings.adapter import EmbedderLike, SeedEmbedder, as_embedder
from tulip_memory.embeddings.base import BaseEmbedding, Vectors
from tulip_memory.embeddings.cache import EmbeddingCache
from tulip_memory.embeddings.factory import embedder_from_config, embedder_from_env
from tulip_memory.embeddings.hashing import HashingEmbedder
from tulip_memory.embeddings.hrr import HRREncoder
from tulip_memory.embeddings.litellm_embedder import LiteLLMEmbedder

__all__ = [
    "BaseEmbedding",
    "EmbedderLike",
    "EmbeddingCache",
    "HRREncoder",
    "HashingEmbedder",
    "LiteLLMEmbedder",
    "SeedEmbedder",
    "Vectors",
    "as_embedder",
    "embedder_from_config",
    "embedder_from_env",
]

"""Turn-level vector recall (the seed's ``core.memory``): semantic search over past turns.

- :class:`TurnVectorStore` — in-memory, append-only, exact cosine search on numpy;
  :class:`Entry` is what it yields, :class:`TurnHit` what it ranks.
- :class:`Memory` — an :class:`EmbeddingBackend` plus a store: ``index_turn``,
  ``index_turn_text``, ``search`` (each with an async twin), ``reindex``.
- :func:`persist_store` / :func:`load_store` — Parquet, ``_schema_version`` 1; needs
  pyarrow, imported only when called.
"""

from tulip_memory.turns.backend import EmbeddingBackend
from tulip_memory.turns.errors import (
    CorruptStoreFileError,
    DimensionMismatchError,
    InvalidTurnError,
    InvalidVectorError,
    ParquetUnavailableError,
    SchemaVersionError,
    StoreFileError,
    TurnNotSerializableError,
    TurnRecallError,
)
from tulip_memory.turns.memory import Memory
from tulip_memory.turns.models import Entry, TurnHit
from tulip_memory.turns.parquet import SCHEMA_VERSION, load_store, persist_store
from tulip_memory.turns.store import TurnVectorStore
from tulip_memory.turns.vectors import cosine_similarity

__all__ = [
    "SCHEMA_VERSION",
    "CorruptStoreFileError",
    "DimensionMismatchError",
    "EmbeddingBackend",
    "Entry",
    "InvalidTurnError",
    "InvalidVectorError",
    "Memory",
    "ParquetUnavailableError",
    "SchemaVersionError",
    "StoreFileError",
    "TurnHit",
    "TurnNotSerializableError",
    "TurnRecallError",
    "TurnVectorStore",
    "cosine_similarity",
    "load_store",
    "persist_store",
]

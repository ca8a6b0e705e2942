"""``tulip.memory.store_backends.postgresql``: :class:`PgMemory` and the ANN width limit."""

from tulip_memory.store.postgres import PGVECTOR_ANN_MAX_DIM, PgMemory

__all__ = ["PGVECTOR_ANN_MAX_DIM", "PgMemory"]

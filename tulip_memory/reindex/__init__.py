"""Online reindex: move a ``PgMemory`` table to another embedding model while it serves.

See :class:`Reindexer`; ``tulip-memory reindex`` is its command line."""

from tulip_memory.reindex.model import (
    Progress,
    ReindexConflict,
    ReindexError,
    ReindexJob,
)
from tulip_memory.reindex.reindexer import Reindexer

__all__ = ["Progress", "ReindexConflict", "ReindexError", "ReindexJob", "Reindexer"]

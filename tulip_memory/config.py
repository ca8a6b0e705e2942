"""The stores every process builds from the environment, alike on both sides.

Workers write and ``tulip_producer.Reader`` reads the same table with the same embedder,
so both build them here: ``TULIP_DATABASE_URL`` (the application role's DSN),
``TULIP_MEMORY_TABLE`` (default ``tulip_memories``) and the ``TULIP_EMBED_*``
settings of :func:`~tulip_memory.embeddings.embedder_from_env`, with
``TULIP_EMBED_ALLOWED``: the other embedders a table's slot registry may name that
this process builds (see :mod:`~tulip_memory.embeddings.allowlist`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tulip_memory.embeddings import embedder_from_env
from tulip_memory.embeddings.allowlist import ENV_ALLOWED
from tulip_memory.store import PgMemory


def database_url(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    url = env.get("TULIP_DATABASE_URL", "").strip()
    if not url:
        raise ValueError(
            "TULIP_DATABASE_URL is not set: the DSN of Postgres with pgvector, as the "
            "application role (tulip-memory dev writes one to its tulip.env)"
        )
    return url


def store_from_env(
    environ: Mapping[str, str] | None = None, *, migrator: str | None = None
) -> PgMemory:
    """The configured store; ``migrator`` (an administrator DSN) migrates its table."""
    env = os.environ if environ is None else environ
    return PgMemory(
        database_url(env),
        table=env.get("TULIP_MEMORY_TABLE", "tulip_memories"),
        embedder=embedder_from_env(env),
        migrator=migrator,
        allowed_embedders=env.get(ENV_ALLOWED, ""),
    )

"""The stores every process builds from the environment, alike on both sides.

Workers write and ``tulip_producer.Reader`` reads the same table with the same embedder,
so both build them from one :class:`StoreSettings`: ``TULIP_DATABASE_URL`` (the
application role's DSN), ``TULIP_MEMORY_TABLE`` (default ``tulip_memories``), the
``TULIP_EMBED_*`` settings of :func:`~tulip_memory.embeddings.embedder_from_config`, and
``TULIP_EMBED_ALLOWED``: the other embedders a table's slot registry may name that
this process builds (see :mod:`~tulip_memory.embeddings.allowlist`). Each variable is
declared once, in :mod:`tulip_memory.env`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tulip_memory import env as lib
from tulip_memory.embeddings import embedder_from_config
from tulip_memory.embeddings.allowlist import EmbedderAllowlist
from tulip_memory.store import PgMemory
from tulip_memory.store.postgres.store import DEFAULT_POOL_SIZE


@dataclass(frozen=True, kw_only=True)
class StoreSettings:
    """The memories store's settings. ``database_url`` may be empty: a role that builds
    no store (the summary worker) needs none, and :meth:`require_database_url` says so
    where one is built."""

    database_url: str = field(default="", repr=False)
    table: str = lib.MEMORY_TABLE.default
    embed_model: str | None = None
    embed_dim: int | None = None
    embed_api_base: str | None = None
    embed_allowed: str = ""

    def __post_init__(self) -> None:
        EmbedderAllowlist.parse(self.embed_allowed)  # a malformed entry fails here

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StoreSettings:
        env = lib.environ(environ)
        return cls(
            database_url=lib.DATABASE_URL.read(env),
            table=lib.MEMORY_TABLE.read(env),
            embed_model=lib.EMBED_MODEL.read(env),
            embed_dim=lib.EMBED_DIM.read(env),
            embed_api_base=lib.EMBED_API_BASE.read(env),
            embed_allowed=lib.EMBED_ALLOWED.read(env),
        )

    def require_database_url(self) -> str:
        if not self.database_url:
            raise ValueError(
                "TULIP_DATABASE_URL is not set: the DSN of Postgres with pgvector, as the "
                "application role (tulip-memory dev writes one to its tulip.env)"
            )
        return self.database_url

    def store(self, *, migrator: str | None = None, pool_size: int = DEFAULT_POOL_SIZE) -> PgMemory:
        """The configured store; ``migrator`` (an administrator DSN) migrates its table;
        ``pool_size``: its connections at most."""
        return PgMemory(
            self.require_database_url(),
            table=self.table,
            embedder=embedder_from_config(
                self.embed_model, dimension=self.embed_dim, api_base=self.embed_api_base
            ),
            migrator=migrator,
            allowed_embedders=self.embed_allowed,
            pool_size=pool_size,
        )


def database_url(environ: Mapping[str, str] | None = None) -> str:
    return StoreSettings.from_env(environ).require_database_url()


def store_from_env(
    environ: Mapping[str, str] | None = None, *, migrator: str | None = None
) -> PgMemory:
    """The configured store; ``migrator`` (an administrator DSN) migrates its table."""
    return StoreSettings.from_env(environ).store(migrator=migrator)

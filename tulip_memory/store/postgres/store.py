"""``PgMemory``: Postgres + pgvector store with per-tenant row-level security.

``namespace[0]`` is the tenant. Every statement runs in a transaction that first pins
``tulip.tenant`` (transaction-local), and the table's forced RLS policy admits only
that tenant's rows, so isolation holds at the database even for raw SQL through the
application role. The store refuses to run as a role that bypasses RLS unless told
to (``allow_rls_bypass=True``, for admin tools).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import importlib.util
import json
import logging
import re
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from tulip_memory.credentials import redact_url
from tulip_memory.embeddings import BaseEmbedding, EmbeddingCache, HashingEmbedder, HRREncoder
from tulip_memory.embeddings.adapter import EmbedderLike, as_embedder
from tulip_memory.embeddings.allowlist import EmbedderAllowlist
from tulip_memory.embeddings.base import Vectors
from tulip_memory.embeddings.factory import spec_of
from tulip_memory.errors import TenantIsolationError
from tulip_memory.store.base import BatchFirstStore, BatchItem
from tulip_memory.store.fusion import WORD_HASHING, HybridRanking
from tulip_memory.store.items import SemanticSearchResult, StoreCapabilities, StoreItem
from tulip_memory.store.postgres import plan, slots, sql
from tulip_memory.store.postgres.admin import as_owner
from tulip_memory.store.postgres.layouts import (
    NO_MODEL,
    EmbedderResolver,
    Layouts,
    resolve_embedder,
)
from tulip_memory.store.postgres.render import render
from tulip_memory.store.postgres.schema import migrate_schema, verify_schema
from tulip_memory.store.postgres.slots import Layout
from tulip_memory.store.postgres.writer import (
    PgWriter,
    Prepared,
    PreparedBatch,
    PreparedTurns,
    SlotVectors,
    TurnRow,
)
from tulip_memory.store.ranking import score_of, tenant_of, vector_or_none
from tulip_memory.store.validation import (
    NS_SEP,
    UNSTORABLE,
    encode_json,
    validate_key,
    validate_limit,
    validate_namespace,
    validate_query,
    validate_threshold,
    validate_vector,
    validate_write,
)

log = logging.getLogger(__name__)

#: pgvector cannot build an HNSW index over more dimensions than this.
PGVECTOR_ANN_MAX_DIM = 2000
_DEFAULT_PG_DIM = 512
_DEFAULT_ENCODING_CACHE = 1024
_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,47}")
#: A text search configuration name, optionally schema-qualified (``pg_catalog.english``).
_TS_CONFIG = re.compile(r"(?:[a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,62}")
DEFAULT_TEXT_SEARCH_CONFIG = "english"
_SUBSTRING_ONLY = (
    "PgMemory: numpy is not installed and no embedder was given, so rows are stored "
    "without vectors and search degrades to full-text (bm25) and case-insensitive "
    "substring matches. "
    "Install numpy (pip install numpy) or pass an embedder for ranked recall."
)


def _validate_ident(name: str, what: str) -> str:
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise ValueError(
            f"{what} {name!r} is not a valid identifier: use lower-case letters, digits "
            "and underscores, starting with a letter or underscore, at most 48 characters"
        )
    return name


def _validate_ts_config(name: str) -> str:
    if not isinstance(name, str) or not _TS_CONFIG.fullmatch(name):
        raise ValueError(
            f"text_search_config {name!r} is not a text search configuration name: use "
            "lower-case letters, digits and underscores, optionally schema-qualified "
            "(e.g. 'english', 'simple', 'public.my_config')"
        )
    return name


def _default_ranking(encoder: BaseEmbedding | None) -> HybridRanking:
    """:data:`WORD_HASHING` for the offline encoders that hash words, else the
    defaults tuned for semantic encoders."""
    if encoder is None or isinstance(encoder, HashingEmbedder | HRREncoder):
        return WORD_HASHING
    return HybridRanking()


def _numpy() -> Any:
    """numpy, or ``None`` when it is not installed (the substring-only mode)."""
    return np if importlib.util.find_spec("numpy") is not None else None


#: Connections of a store's pool at most, unless it is told otherwise.
DEFAULT_POOL_SIZE = 10


class PgMemory(BatchFirstStore):
    """Postgres + pgvector memory store with per-tenant row-level security."""

    def __init__(
        self,
        dsn: str,
        *,
        table: str = "tulip_memories",
        dim: int = _DEFAULT_PG_DIM,
        embedder: EmbedderLike | None = None,
        encoding_cache: int = _DEFAULT_ENCODING_CACHE,
        schema: str = "public",
        pool_size: int = DEFAULT_POOL_SIZE,
        allow_rls_bypass: bool = False,
        text_search_config: str = DEFAULT_TEXT_SEARCH_CONFIG,
        ranking: HybridRanking | None = None,
        embedders: EmbedderResolver | None = None,
        migrator: str | None = None,
        recall_plan: Literal["auto", "exact"] = "auto",
        allowed_embedders: str | Iterable[str] = (),
    ) -> None:
        """``text_search_config`` names the Postgres text search configuration that
        tokenises, stems and drops stop words ('english': Snowball stemming and the
        English stop list; 'simple': lower-casing only, every word kept; or one of
        your own, e.g. a copy of 'english' with another stop-word file). A table is
        indexed under the configuration of the store that created its full-text
        column, and a store with another one is refused at first use. ``ranking``
        sets the weights of the hybrid (bm25 + vector) search; by default
        :data:`~tulip_memory.store.fusion.WORD_HASHING` for the offline word-hashing
        encoders, :class:`~tulip_memory.store.fusion.HybridRanking` for any other.

        After an online reindex (:mod:`tulip_memory.reindex`) the table's vectors may
        be of another model than ``embedder``: the table's slot registry names it, and
        ``embedders`` builds its embedder from the model string (by default
        :func:`~tulip_memory.embeddings.embedder_from_config`), but only for a model
        (and API base) that is ``embedder``'s own or that ``allowed_embedders`` lists
        (``model`` or ``model=api_base`` entries, ``hashing`` always allowed): anything
        else is refused naming the slot (:mod:`~tulip_memory.embeddings.allowlist`), so
        a changed registry row cannot send query texts to an address of its choice.

        The store never migrates through ``dsn`` (the application role owns nothing):
        it verifies at first use that the table is at this code's schema version.
        ``migrator``, a DSN whose role may act as the owner role (the administrator's,
        or a member of ``tulip_owner``), migrates the table first (:meth:`migrate`);
        ``tulip-memory provision`` does the same for the configured table.


        ``recall_plan="auto"`` lets each hybrid search take the exact scan of its
        scope or, for a big one, the HNSW and GIN indexes (see
        :mod:`~tulip_memory.store.postgres.plan`); ``"exact"`` always scans (the
        reference ranking, for benchmarks and audits)."""
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        if encoding_cache < 0:
            raise ValueError(f"encoding_cache must be >= 0, got {encoding_cache}")
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        if recall_plan not in ("auto", "exact"):
            raise ValueError(f"recall_plan must be 'auto' or 'exact', got {recall_plan!r}")
        if ranking is not None and not isinstance(ranking, HybridRanking):
            raise TypeError(f"ranking must be a HybridRanking, got {type(ranking).__name__}")
        self._ts_config = _validate_ts_config(text_search_config)
        self._dsn = dsn
        self._table = _validate_ident(table, "table")
        self._schema = _validate_ident(schema, "schema")
        self._qualified = f"{self._schema}.{self._table}"
        self._dim = dim
        # Any embedder with `dimension` and `embed` (the seed's contract), adapted once.
        embedder = as_embedder(embedder) if embedder is not None else None
        self._embedder = embedder
        self._vdim = embedder.dimension if embedder is not None else 2 * dim
        if embedder is None and self._vdim > PGVECTOR_ANN_MAX_DIM:
            raise ValueError(
                f"PgMemory(dim={dim}) is not indexable: the HRR encoding stores "
                f"[cos φ, sin φ], so the pgvector column would be 2·{dim} = "
                f"{self._vdim} dimensions wide, over pgvector's "
                f"{PGVECTOR_ANN_MAX_DIM}-dimension limit for an HNSW index "
                f"(CREATE INDEX would raise ProgramLimitExceededError). Pass "
                f"dim <= {PGVECTOR_ANN_MAX_DIM // 2} (the default is "
                f"{_DEFAULT_PG_DIM}), or pass an embedder."
            )
        self._ann = self._vdim <= PGVECTOR_ANN_MAX_DIM
        if not self._ann:
            warnings.warn(
                f"PgMemory: embedder dimension {self._vdim} exceeds pgvector's "
                f"{PGVECTOR_ANN_MAX_DIM}-dimension limit for an HNSW index, so "
                f"table {self._table!r} will be created WITHOUT an ANN index. Namespace "
                f"searches are exact scans either way; tenant-wide ANN is unavailable. "
                f"Use an embedder with <= {PGVECTOR_ANN_MAX_DIM} dimensions for an index.",
                RuntimeWarning,
                stacklevel=2,
            )
        self._substring_only = embedder is None and _numpy() is None
        self._substring_warned = False
        if self._substring_only:
            warnings.warn(_SUBSTRING_ONLY, RuntimeWarning, stacklevel=2)
        self._encoder: BaseEmbedding | None = (
            None if self._substring_only else (embedder or HRREncoder(dim))
        )
        self._ranking = ranking if ranking is not None else _default_ranking(self._encoder)
        self._cache = EmbeddingCache(encoding_cache)
        self._pool_size = pool_size
        self._migrator = migrator
        self._allow_rls_bypass = allow_rls_bypass
        self._sql: dict[str, str] = {
            name: render(getattr(sql, name), t=self._qualified, p=self._table)
            for name in dir(sql)
            if name.isupper() and not name.startswith("_")
        }
        self._layouts = Layouts(
            self._encoder,
            embedders or resolve_embedder,
            self._sql["SLOTS"],
            EmbedderAllowlist.parse(allowed_embedders),
        )
        self._pool: Any = None
        self._recall_plan = recall_plan
        self._caps = plan.Capabilities(iterative_scan=False)
        self._table_rows = plan.TableRows()
        #: How many hybrid searches took each path (``plan.EXACT``, ``INDEX``, ``SCAN``,
        #: ``FALLBACK``).
        self.plans: collections.Counter[str] = collections.Counter()
        # Serialises first use so concurrent calls build one pool and migrate once.
        self._pool_lock = asyncio.Lock()

    # -- plumbing -------------------------------------------------------------

    @property
    def capabilities(self) -> StoreCapabilities:
        return StoreCapabilities(
            search=True,
            semantic_search=not self._substring_only,
            embedding_dimension=None if self._substring_only else self._vdim,
            list_namespaces=True,
            batch_operations=True,
            transactions=True,
        )

    @property
    def table(self) -> str:
        return self._qualified

    @property
    def encoding_cache(self) -> EmbeddingCache:
        return self._cache

    @property
    def text_search_config(self) -> str:
        return self._ts_config

    @property
    def ranking(self) -> HybridRanking:
        return self._ranking

    async def _get_pool(self) -> Any:
        if self._pool is not None:
            return self._pool
        async with self._pool_lock:
            if self._pool is None:
                self._pool = await self._build_pool()
        return self._pool

    async def _build_pool(self) -> Any:
        from pgvector.asyncpg import register_vector

        from tulip_memory.store.postgres.connect import connect, create_pool

        conn = await connect(self._dsn)
        if await self._provisions(conn):
            await conn.close()
            self._dsn = await self._provision_self()
            conn = await connect(self._dsn)
        try:
            await self._check_role(conn)
            if self._migrator is not None:
                await self.migrate()
            await verify_schema(
                conn, table=self._qualified, dim=self._vdim, text_search_config=self._ts_config
            )
            self._caps = await plan.Capabilities.probe(conn)
        finally:
            await conn.close()
        if self._recall_plan == "auto" and not self._caps.index_path:
            log.warning("PgMemory %s: %s", self._qualified, self._caps.why_exact())
        return await create_pool(
            self._dsn, min_size=1, max_size=self._pool_size, init=register_vector
        )

    async def migrate(self) -> list[int]:
        """Bring the table to this code's schema as the owner role, through the
        ``migrator`` DSN; the versions applied now."""
        if self._migrator is None:
            raise ValueError("PgMemory.migrate needs migrator=<a DSN that may act as the owner>")
        async with as_owner(self._migrator) as conn:
            return await migrate_schema(
                conn,
                table=self._qualified,
                name=self._table,
                dim=self._vdim,
                ann=self._ann,
                text_search_config=self._ts_config,
                model=self._encoder.model if self._encoder is not None else NO_MODEL,
                spec=None if self._encoder is None else spec_of(self._encoder),
            )

    async def _provisions(self, conn: Any) -> bool:
        """Whether ``dsn`` is a superuser's (a laptop's bare Postgres) that this store
        provisions the roles with, to serve as the application role (the seed's
        PgMemory "works against a bare Postgres locally")."""
        row = await conn.fetchrow(self._sql["ROLE_FLAGS"])
        return bool(row is not None and row["rolsuper"] and not self._allow_rls_bypass)

    async def _provision_self(self) -> str:
        """Provision the owner, DML, operator and application roles through the
        superuser's ``dsn`` (as ``tulip-memory provision`` does), migrate the table as
        the owner, and return the application role's DSN, so row-level security binds
        this store's statements. Its password derives from the superuser's DSN: the
        same in every process given that DSN, and as secret as it."""
        from tulip_memory.store.postgres.admin import provision_app_role

        admin = self._dsn
        key = b"tulip-memory PgMemory application role"
        password = hashlib.blake2b(admin.encode(), key=key, digest_size=16).hexdigest()
        app = await provision_app_role(admin, password=password, schema=self._schema)
        if self._migrator is None:
            self._migrator = admin
        log.warning(
            "PgMemory: %s is a superuser: provisioned the roles, migrated %s and now "
            "connects as tulip_app so row-level security binds. A development "
            "convenience: in production run `tulip-memory provision` once "
            "(TULIP_DATABASE_ADMIN_URL) and give the store the application role's DSN",
            redact_url(admin),
            self._qualified,
        )
        return app

    async def _check_role(self, conn: Any) -> None:
        row = await conn.fetchrow(self._sql["ROLE_FLAGS"])
        if (
            row is not None
            and (row["rolsuper"] or row["rolbypassrls"])
            and not (self._allow_rls_bypass)
        ):
            raise TenantIsolationError(
                "PgMemory is connected as a role that bypasses row-level security "
                "(BYPASSRLS), so tenant isolation would not hold at the "
                "database. Create the application role once, with this DSN as the "
                "administrator:\n\n"
                "    TULIP_DATABASE_ADMIN_URL='<this DSN>' tulip-memory provision "
                "--role tulip_app\n\n"
                "then connect as tulip_app (same host and database; set its password "
                "with TULIP_APP_PASSWORD at provisioning). An admin tool that must see "
                "every tenant passes allow_rls_bypass=True."
            )

    async def _pin(self, conn: Any, tenant: str) -> None:
        await conn.execute(self._sql["PIN_TENANT"], tenant)

    async def _vector(self, slot: str, tenant: str, text: str) -> Vectors | None:
        """The query encoding of ``text`` in ``slot``'s model, through the LRU cache."""
        embedder = await self.slot_embedder(slot)
        if embedder is None:
            return None
        key = (tenant, embedder.model, text)
        found, vec = self._cache.get(key)
        if not found:
            vec = vector_or_none((await embedder.aembed([text]))[0])
            self._cache.put(key, vec)
        return vec

    async def _query_vector(self, slot: str, tenant: str, text: str | None) -> Vectors | None:
        """The query's vector for a hybrid search; none without a query or when the
        vector list has no weight (a lexical-only ranking never calls the embedder on
        the read path)."""
        if not text or self._ranking.vector_weight == 0:
            return None
        return await self._vector(slot, tenant, text)

    async def _ranked(
        self,
        tenant: str,
        stmt: str,
        query: str | None,
        args: Callable[[Vectors | None, Layout], tuple[Any, ...]],
    ) -> list[Any]:
        """A statement over the slot recall reads, with the query encoded in that slot's
        model."""

        async def fetch(
            conn: Any, layout: Layout, qvec: Vectors | None, counted: Counted
        ) -> list[Any]:
            statement = slots.read_sql(self._sql[stmt], layout.read)
            return list(await conn.fetch(statement, tenant, *args(qvec, layout)))

        return await self._reading(tenant, query, fetch)

    async def _reading(
        self,
        tenant: str,
        query: str | None,
        body: Callable[[Any, Layout, Vectors | None, Counted], Awaitable[list[Any]]],
        counting: Counting | None = None,
    ) -> list[Any]:
        """``body`` in a read transaction over the slot recall reads, with the query
        encoded in that slot's model and the rows ``counting`` asks of the counters
        (:meth:`_pin_read`). The slot is the one this transaction reads from the layout
        (one round trip with the tenant pin): a reindex's switch is atomic for every
        reader."""
        for attempt in (1, 2):
            guess = self._layouts.cached(tenant)
            qvec = await self._query_vector(guess.read, tenant, query)
            pool = await self._get_pool()
            try:
                async with pool.acquire() as conn, conn.transaction():
                    row, counted = await self._pin_read(conn, tenant, counting)
                    layout = await self._layouts.note(conn, tenant, Layout.from_row(row))
                    if layout.read != guess.read:
                        qvec = await self._query_vector(layout.read, tenant, query)
                    return await body(conn, layout, qvec, counted)
            except _undefined_column() as e:
                # A finalize dropped the slot between our layout read and statement.
                if attempt == 2:
                    raise
                log.info("vector slot dropped under a read, retrying: %s", e)
        raise AssertionError("unreachable")

    async def _pin_read(
        self, conn: Any, tenant: str, counting: Counting | None
    ) -> tuple[Any, Counted]:
        """A read's first statement: the tenant pinned and its layout's row; with
        ``counting``, where the index path may be taken at all, in the same round trip
        the counted rows of its namespaces (absent: not counted yet), which of them
        have a graph of their own, and the index path's settings. Otherwise no counts:
        every scope takes the exact path."""
        if counting is None or not (
            self._recall_plan == "auto"
            and self._caps.index_path
            and self._encoder is not None
            and self._ann
        ):
            return await conn.fetchrow(self._sql["PIN_LAYOUT"], tenant), NOT_COUNTED
        settings = (str(plan.ef_search(counting.limit)), str(plan.MAX_SCAN_TUPLES))
        row = await conn.fetchrow(self._sql[counting.pin], tenant, counting.names, *settings)
        rows = dict(zip(row["names"] or (), row["rows"] or (), strict=True))
        return row, Counted(rows, frozenset(row["graphs"] or ()))

    async def _planned(
        self,
        conn: Any,
        layout: Layout,
        *,
        table: str,
        rows: int | None,
        limit: int,
        exact: tuple[str, tuple[Any, ...]],
        indexed: tuple[str, tuple[Any, ...]],
        own: bool = False,
    ) -> list[Any]:
        """One hybrid ranking of a scope of ``rows`` counted rows (``None``: not
        counted; ``own``: it has a graph of its own): the index path when
        :func:`plan.choose` picks it (its nearest rows from an HNSW graph or from the
        scope's scan, :func:`plan.ways`) and its
        candidates cover ``min(limit, rows)``, else the exact path. ``plans`` counts
        the path chosen, or :data:`plan.FALLBACK` when another one answered."""
        chosen = plan.EXACT
        # The slot's width names its index's expression (a slot is in the registry
        # whenever a layout names it: ``Layouts.note``).
        dim = self._layouts.width(layout.read)
        if rows is not None and dim is not None:
            table_rows = await self._table_rows.get(conn, table)
            chosen = plan.choose(rows, table_rows, limit, own=own)
        if chosen != plan.EXACT:  # under the settings the pin set (_pin_read)
            assert rows is not None
            stmt, args = indexed
            for way in plan.ways(chosen):
                statement = sql.nearest(self._sql[stmt], way)
                got = await conn.fetch(slots.read_sql(statement, layout.read, dim), *args)
                if got and got[0]["_cands"] >= min(limit, rows):
                    self.plans[chosen if way == chosen else plan.FALLBACK] += 1
                    return [r for r in got if r["_pos"] is not None]
            chosen = plan.FALLBACK
        self.plans[chosen] += 1
        stmt, args = exact
        return list(await conn.fetch(slots.read_sql(self._sql[stmt], layout.read), *args))

    # -- the SlotWriter protocol of PgWriter ----------------------------------

    async def layout_in(self, conn: Any, tenant: str, version: int) -> Layout:
        """The tenant's layout in a write transaction that read layout ``version``
        after taking the shared lock: the cached one if it is of that version (no
        change can commit while the lock is held), else read now."""
        cached = self._layouts.for_write(tenant, version)
        if cached is not None:
            return cached
        row = await conn.fetchrow(self._sql["LAYOUT"], tenant)
        layout = await self._layouts.note(conn, tenant, Layout.from_row(row))
        self._layouts.note_write(tenant, version, layout)
        return layout

    async def fill_slots(
        self, tenant: str, slots: Sequence[str], texts: list[str], have: SlotVectors
    ) -> list[list[Vectors | None]]:
        """The vectors of ``texts`` for each slot, embedding those ``have`` lacks (a
        layout that changed since the batch was prepared)."""
        out = []
        for slot in slots:
            vectors = have.get(slot)
            if vectors is None:
                vectors = await self._layouts.encode(slot, texts, self._get_pool)
            out.append(vectors)
        return out

    def upsert_sql(self, slot_names: Sequence[str], *, fenced: bool) -> str:
        return _upsert_sql(self._qualified, tuple(slot_names), fenced)

    def insert_turns_sql(self, slot_names: Sequence[str], *, replace: bool = False) -> str:
        return _insert_turns_sql(self._qualified, tuple(slot_names), replace)

    def statement(self, name: str) -> str:
        return self._sql[name]

    async def _encode_for(self, tenant: str, texts: list[str]) -> dict[str, list[Vectors | None]]:
        """``texts`` in the model of every slot the tenant's writes fill (as last seen;
        the write transaction fills any slot added since)."""
        layout = self._layouts.cached(tenant)
        return {s: await self._layouts.encode(s, texts, self._get_pool) for s in layout.write}

    def _text_args(self, query: str) -> tuple[Any, ...]:
        """``$5``–``$10`` of a hybrid statement: the query text (NUL and lone UTF-16
        surrogates, which Postgres text cannot hold, read as spaces), the configuration,
        the ranking knobs."""
        r = self._ranking
        text = UNSTORABLE.sub(" ", query)
        return (text, self._ts_config, r.lexical_weight, r.vector_weight, r.k1, r.b)

    def _warn_substring(self) -> None:
        if not self._substring_warned:
            self._substring_warned = True
            log.warning(_SUBSTRING_ONLY)

    # -- writes ---------------------------------------------------------------

    async def put_with_embedding(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Any,
        embedding: list[float],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        rows = [_prepare(namespace, key, value, metadata)]
        tenant = tenant_of([rows[0][0]], "put")
        read = self._layouts.cached(tenant).read
        info = await self._layouts.info(read, self._get_pool)
        vec = np.asarray(validate_vector(embedding, info.dim), dtype=np.float32)
        batch = PreparedBatch(tenant, rows, {read: [vector_or_none(vec)]})
        async with self.transaction(batch.tenant) as tx:
            await tx.write(batch)

    async def put_batch(self, items: list[BatchItem]) -> None:
        """All items in one transaction and one statement; a batch spans one tenant."""
        if not items:
            return
        batch = await self.prepare(items)
        async with self.transaction(batch.tenant) as tx:
            await tx.write(batch)

    async def prepare(self, items: list[BatchItem]) -> PreparedBatch:
        """Validate and encode writes (one embedder call) ahead of a transaction, so no
        transaction is held open across a model call."""
        if not items:
            raise ValueError("prepare needs at least one item")
        batch, _ = await self.prepare_event(items, None)
        assert batch is not None
        return batch

    async def prepare_event(
        self, items: list[BatchItem], turns: TurnsIn | None
    ) -> tuple[PreparedBatch | None, PreparedTurns | None]:
        """Memory writes and a session's turns, validated and encoded together in ONE
        embedder call."""
        rows = _dedupe([_prepare(ns, k, v, md) for ns, k, v, md in items])
        tenant = tenant_of([r[0] for r in rows], "put_batch") if rows else None
        turn_rows = [] if turns is None else turns.rows
        if turns is not None:
            ns = validate_namespace(turns.namespace)
            if tenant is not None and ns[0] != tenant:
                raise ValueError("a session's turns and memories must share one tenant")
        texts = [r[4] for r in rows] + [t.text for t in turn_rows]
        owner = tenant or (None if turns is None else validate_namespace(turns.namespace)[0])
        by_slot = {} if owner is None else await self._encode_for(owner, texts)
        n = len(rows)
        head = {s: v[:n] for s, v in by_slot.items()}
        batch = PreparedBatch(tenant, rows, head) if tenant else None
        prepared_turns = None
        if turns is not None:
            prepared_turns = PreparedTurns(
                validate_namespace(turns.namespace),
                turns.thread_id,
                turns.event_id,
                turn_rows,
                {s: v[n:] for s, v in by_slot.items()},
            )
        return batch, prepared_turns

    async def search_turns(
        self,
        namespace: tuple[str, ...],
        query: str,
        top_k: int = 5,
        threshold: float | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[TurnMatch]:
        """The namespace's turns most relevant to ``query``, hybrid-ranked (bm25 and
        cosine, fused; see :mod:`~tulip_memory.store.postgres.sql`) and complete:
        ``min(top_k, turns)`` results when no threshold cuts them. ``score`` and
        ``threshold`` are cosine similarities (0.0 for a turn without a vector, which
        any threshold drops). ``since`` / ``until`` keep the turns whose time (the
        caller's, when its messages carried one) is in ``[since, until)``, a range of
        the ``(tenant, ns, created_at)`` index; they must be timezone-aware."""
        ns = validate_namespace(namespace)
        query = validate_query(query) or ""
        threshold, top_k = validate_threshold(threshold), validate_limit(top_k, "top_k")
        for name, when in (("since", since), ("until", until)):
            if when is not None and (not isinstance(when, datetime) or when.tzinfo is None):
                raise ValueError(f"{name} must be a timezone-aware datetime, got {when!r}")
        if top_k <= 0:
            return []
        name = NS_SEP.join(ns)

        async def ranked(
            conn: Any, layout: Layout, q: Vectors | None, counted: Counted
        ) -> list[Any]:
            args = (ns[0], name, top_k, q, *self._text_args(query), threshold, since, until)
            return await self._planned(
                conn,
                layout,
                table=f"{self._qualified}_turns",
                rows=counted.rows.get(name),
                limit=top_k,
                exact=("SEARCH_TURNS", args),
                indexed=("SEARCH_TURNS_INDEXED", (*args, *plan.index_args(top_k))),
                own=name in counted.graphs,
            )

        rows = await self._reading(
            ns[0], query, ranked, Counting("PIN_TURNS_COUNTED", [name], top_k)
        )
        return [
            TurnMatch(
                score=0.0 if r["score"] is None else float(r["score"]),
                text=r["text"],
                turn=json.loads(r["turn"]),
                metadata=json.loads(r["metadata"]),
                position=r["position"],
            )
            for r in rows
        ]

    async def last_turn(
        self, namespace: tuple[str, ...], thread_id: str, before_seq: int
    ) -> StoredTurn | None:
        """The latest turn of ``thread_id`` that an event older than ``before_seq`` wrote."""
        ns = validate_namespace(namespace)
        row = await self._fetchrow(ns[0], "LAST_TURN", NS_SEP.join(ns), thread_id, before_seq)
        if row is None:
            return None
        return StoredTurn(
            event_id=row["event_id"],
            position=row["position"],
            text=row["text"],
            turn=json.loads(row["turn"]),
            metadata=json.loads(row["metadata"]),
            source_seq=row["source_seq"],
            at=row["at"],
        )

    @asynccontextmanager
    async def transaction(self, tenant: str) -> AsyncIterator[PgWriter]:
        """One transaction pinned to ``tenant``: writes, prunes, and any statement of
        the caller's (e.g. a ledger row) commit together or not at all."""
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            version = await conn.fetchval(self._sql["PIN_SHARED"], tenant, column=1)
            yield PgWriter(conn, tenant, self, version)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """A pooled connection, no tenant pinned: row-level security admits no
        tenant's row through it until the caller pins one (``PIN_TENANT``)."""
        pool = await self._get_pool()
        async with pool.acquire() as conn:
            yield conn

    @asynccontextmanager
    async def layout_change(self) -> AsyncIterator[Any]:
        """A transaction holding the layout lock exclusively: it waits for the write
        transactions in flight, and later ones read the layout it commits."""
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute(self._sql["LAYOUT_LOCK"])
            await conn.execute(self._sql["BUMP_LAYOUT"])
            yield conn

    def allow_embedder(self, spec: str, api_base: str | None = None) -> None:
        """Let slots of model ``spec`` at ``api_base`` be embedded by this store (the
        reindex command allows the model it was asked to move to)."""
        self._layouts.allowed = self._layouts.allowed.including(spec, api_base)

    async def slot_embedder(self, slot: str) -> BaseEmbedding | None:
        """The embedder of a vector slot (see :mod:`~tulip_memory.store.postgres.slots`)."""
        return self._layouts.embedder(await self._layouts.info(slot, self._get_pool))

    @property
    def table_name(self) -> str:
        """The table's bare name (index and policy names derive from it)."""
        return self._table

    async def delete(self, namespace: tuple[str, ...], key: str) -> bool:
        ns, k = validate_namespace(namespace), validate_key(key)
        row = await self._fetchrow(ns[0], "DELETE", NS_SEP.join(ns), k)
        return row is not None

    async def clear_namespace(self, namespace: tuple[str, ...]) -> int:
        ns = validate_namespace(namespace)
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            await self._pin(conn, ns[0])
            status = await conn.execute(self._sql["CLEAR"], ns[0], NS_SEP.join(ns))
        return int(status.split()[-1])

    # -- reads ----------------------------------------------------------------

    async def _fetchrow(self, tenant: str, stmt: str, *args: Any) -> Any:
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            await self._pin(conn, tenant)
            return await conn.fetchrow(self._sql[stmt], tenant, *args)

    async def _fetch(self, tenant: str, stmt: str, *args: Any) -> list[Any]:
        pool = await self._get_pool()
        async with pool.acquire() as conn, conn.transaction():
            await self._pin(conn, tenant)
            return list(await conn.fetch(self._sql[stmt], tenant, *args))

    async def get(self, namespace: tuple[str, ...], key: str) -> Any | None:
        item = await self.get_item(namespace, key)
        return None if item is None else item.value

    async def get_item(self, namespace: tuple[str, ...], key: str) -> StoreItem | None:
        ns, k = validate_namespace(namespace), validate_key(key)
        row = await self._fetchrow(ns[0], "GET", NS_SEP.join(ns), k)
        return None if row is None else _row_to_item(ns, row)

    async def get_batch(
        self, keys: list[tuple[tuple[str, ...], str]]
    ) -> dict[tuple[tuple[str, ...], str], Any]:
        if not keys:
            return {}
        checked = [(validate_namespace(ns), validate_key(k)) for ns, k in keys]
        tenant = tenant_of([ns for ns, _ in checked], "get_batch")
        by_name = {NS_SEP.join(ns): ns for ns, _ in checked}
        rows = await self._fetch(
            tenant, "GET_MANY", [NS_SEP.join(ns) for ns, _ in checked], [k for _, k in checked]
        )
        return {(by_name[r["ns"]], r["key"]): json.loads(r["value"]) for r in rows}

    async def get_embedding(self, namespace: tuple[str, ...], key: str) -> list[float] | None:
        ns, k = validate_namespace(namespace), validate_key(key)
        rows = await self._ranked(ns[0], "GET_EMBEDDING", None, lambda *_: (NS_SEP.join(ns), k))
        row = rows[0] if rows else None
        if row is None or row["embedding"] is None:
            return None
        return [float(x) for x in row["embedding"].to_list()]

    async def list_keys(self, namespace: tuple[str, ...], limit: int = 100) -> list[str]:
        ns, limit = validate_namespace(namespace), validate_limit(limit)
        rows = await self._fetch(ns[0], "LIST_KEYS", NS_SEP.join(ns), limit)
        return [r["key"] for r in rows]

    async def list_namespaces(
        self, prefix: tuple[str, ...] | None = None, limit: int = 100
    ) -> list[tuple[str, ...]]:
        """Namespaces under ``prefix``, whose first part names the tenant to list."""
        if not prefix:
            raise ValueError(
                "PgMemory.list_namespaces needs a prefix starting with the tenant "
                "(namespace[0]): row-level security confines every call to one tenant"
            )
        pre, limit = validate_namespace(prefix), validate_limit(limit)
        rows = await self._fetch(pre[0], "LIST_NAMESPACES", NS_SEP.join(pre), limit)
        return [tuple(r["ns"].split(NS_SEP)) for r in rows]

    async def _search_batch(
        self, tenant: str, nss: list[tuple[str, ...]], query: str | None, limit: int
    ) -> list[list[StoreItem]]:
        """Every namespace in one statement."""
        names = [NS_SEP.join(ns) for ns in nss]
        if not query:
            rows = await self._fetch(tenant, "SEARCH_RECENT", names, limit)
        else:
            # Without vectors (substring-only mode) a search keeps its documented
            # match semantics: rows matching lexically or as a substring, bm25 first.
            substring_only = self._encoder is None
            if substring_only:
                self._warn_substring()
            rows = await self._search_namespaces(tenant, names, query, limit, substring_only)
        out: list[list[StoreItem]] = [[] for _ in nss]
        for r in rows:
            i = int(r["idx"]) - 1
            out[i].append(_row_to_item(nss[i], r))
        return out

    async def _search_namespaces(
        self, tenant: str, names: list[str], query: str, limit: int, substring_only: bool
    ) -> list[Any]:
        """Each namespace ranked on its own path: the uncounted and small ones in one
        exact statement, each big one on the index path (rows carry ``idx``, 1-based)."""

        async def ranked(
            conn: Any, layout: Layout, q: Vectors | None, counted: Counted
        ) -> list[Any]:
            text = self._text_args(query)
            counts = counted.rows
            table_rows = await self._table_rows.get(conn, self._qualified) if counts else 0.0
            big = {
                i
                for i, n in enumerate(names)
                if n in counts and plan.choose(counts[n], table_rows, limit) != plan.EXACT
            }
            out: list[Any] = []
            rest = [n for i, n in enumerate(names) if i not in big]
            if rest:
                args = (tenant, rest, limit, q, *text, substring_only)
                exact = slots.read_sql(self._sql["SEARCH_HYBRID"], layout.read)
                where = [i for i in range(len(names)) if i not in big]
                for r in await conn.fetch(exact, *args):
                    out.append({**dict(r), "idx": where[int(r["idx"]) - 1] + 1})
                self.plans[plan.EXACT] += len(rest)
            for i in sorted(big):
                n = names[i]
                args = (tenant, n, limit, q, *text, substring_only)
                got = await self._planned(
                    conn,
                    layout,
                    table=self._qualified,
                    rows=counts[n],
                    limit=limit,
                    exact=("SEARCH_HYBRID", (tenant, [n], limit, q, *text, substring_only)),
                    indexed=("SEARCH_INDEXED", (*args, *plan.index_args(limit))),
                    own=n in counted.graphs,
                )
                out.extend({**dict(r), "idx": i + 1} for r in got)
            return out

        return await self._reading(tenant, query, ranked, Counting("PIN_COUNTED", names, limit))

    async def search_across(
        self,
        namespaces: Sequence[tuple[str, ...]],
        query: str | None = None,
        limit: int = 10,
    ) -> list[SemanticSearchResult]:
        """One ranking over the rows of several namespaces of one tenant, in one
        statement: hybrid (bm25 and exact cosine, fused) with a query, most recent
        first without one. ``score`` and ``distance`` are the row's cosine ones."""
        nss = [validate_namespace(ns) for ns in namespaces]
        query, limit = validate_query(query), validate_limit(limit)
        if not nss or not limit:
            return []
        tenant = tenant_of(nss, "search_across")
        by_name = {NS_SEP.join(ns): ns for ns in nss}
        if not query:
            rows = await self._fetch(tenant, "SEARCH_ACROSS_RECENT", list(by_name), limit)
        else:
            rows = await self._search_scope(tenant, list(by_name), query, limit)
        out = []
        for r in rows:
            dist = None if r["distance"] is None else float(r["distance"])
            score = 0.0 if dist is None else score_of(dist)
            out.append(SemanticSearchResult(_row_to_item(by_name[r["ns"]], r), score, dist))
        return out

    async def _search_scope(
        self, tenant: str, names: list[str], query: str, limit: int
    ) -> list[Any]:
        """One ranking over the rows of ``names``, on the path their total rows take."""

        async def ranked(
            conn: Any, layout: Layout, q: Vectors | None, counted: Counted
        ) -> list[Any]:
            args = (tenant, names, limit, q, *self._text_args(query))
            return await self._planned(
                conn,
                layout,
                table=self._qualified,
                rows=sum(counted.rows.values()) if counted.rows else None,
                limit=limit,
                exact=("SEARCH_ACROSS_HYBRID", args),
                indexed=("SEARCH_ACROSS_INDEXED", (*args, *plan.index_args(limit))),
            )

        return await self._reading(tenant, query, ranked, Counting("PIN_COUNTED", names, limit))

    async def search_by_embedding(
        self,
        namespace: tuple[str, ...],
        query_embedding: list[float],
        limit: int = 10,
        threshold: float | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> list[SemanticSearchResult]:
        ns = validate_namespace(namespace)
        threshold, limit = validate_threshold(threshold), validate_limit(limit)
        mf = None if metadata_filter is None else encode_json(metadata_filter, "metadata_filter")
        name = NS_SEP.join(ns)

        # The width is checked against the slot recall reads in the statement's own
        # transaction (a reindex may have switched it since this process last looked).
        size = len(query_embedding) if hasattr(query_embedding, "__len__") else 0
        q = np.asarray(validate_vector(query_embedding, size), dtype=np.float32)
        if not np.any(q) or not limit:
            return []
        rows = await self._ranked(
            ns[0],
            "SEARCH_BY_EMBEDDING",
            None,
            lambda _, lay: (name, _checked_width(q, lay, self._layouts), limit, mf, threshold),
        )
        return [
            SemanticSearchResult(
                item=_row_to_item(ns, r),
                score=score_of(float(r["distance"])),
                distance=float(r["distance"]),
            )
            for r in rows
        ]

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


@dataclass(frozen=True)
class Counting:
    """What a hybrid search's first statement counts (``PgMemory._pin_read``): the
    pin of the counters' table (``PIN_COUNTED``, ``PIN_TURNS_COUNTED``), the scopes'
    namespaces and the search's limit (the index path's settings follow it)."""

    pin: str
    names: list[str]
    limit: int


@dataclass(frozen=True)
class Counted:
    """What a hybrid search's first statement read of its namespaces: their counted
    rows (a namespace never counted is absent) and those with a graph of their own
    over the slot recall reads (:mod:`~tulip_memory.store.postgres.graphs`)."""

    rows: Mapping[str, int]
    graphs: frozenset[str]


NOT_COUNTED = Counted({}, frozenset())


@dataclass(frozen=True)
class TurnsIn:
    """A session's completed turns to index with its event."""

    namespace: tuple[str, ...]
    thread_id: str
    event_id: str
    rows: list[TurnRow]


@dataclass(frozen=True, kw_only=True)
class StoredTurn:
    """A turn as stored: where it is (event, position), what it says, when it was."""

    event_id: str
    position: int
    text: str
    turn: dict[str, Any]
    metadata: dict[str, Any]
    source_seq: int
    at: float


@dataclass(frozen=True)
class TurnMatch:
    score: float
    text: str
    turn: dict[str, Any]
    metadata: dict[str, Any]
    position: int


def _undefined_column() -> type[Exception]:
    import asyncpg

    return asyncpg.UndefinedColumnError  # type: ignore[no-any-return]


@lru_cache(maxsize=64)
def _upsert_sql(table: str, slot_names: tuple[str, ...], fenced: bool) -> str:
    return slots.upsert_sql(table, slot_names, fenced=fenced)


@lru_cache(maxsize=64)
def _insert_turns_sql(table: str, slot_names: tuple[str, ...], replace: bool) -> str:
    return slots.insert_turns_sql(table, slot_names, replace=replace)


def _checked_width(q: Vectors, layout: Layout, layouts: Layouts) -> Vectors:
    """The caller's query vector, if it is as wide as the slot recall reads now."""
    dim = layouts.width(layout.read)
    if dim is not None and dim != len(q):
        raise ValueError(
            f"query embedding has {len(q)} dimensions, but recall now reads "
            f"{dim}-dimensional vectors (slot {layout.read!r}, after a reindex)"
        )
    return q


def _prepare(namespace: Any, key: Any, value: Any, metadata: Any) -> Prepared:
    """Validate one write; ``(ns, key, value_json, metadata_json, content)``."""
    w = validate_write(namespace, key, value, metadata)
    return w.namespace, w.key, w.value_json, w.metadata_json, w.content


def _dedupe(rows: list[Prepared]) -> list[Prepared]:
    """Last write of a (namespace, key) wins, as sequential puts would leave it."""
    last = {(r[0], r[1]): r for r in rows}
    return list(last.values())


def _row_to_item(ns: tuple[str, ...], r: Any) -> StoreItem:
    return StoreItem(
        namespace=ns,
        key=r["key"],
        value=json.loads(r["value"]),
        metadata=json.loads(r["metadata"]),
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        version=r["version"],
    )

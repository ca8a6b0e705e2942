"""``InMemoryStore``: every capability, in one process, safe under concurrent use.

Values are kept as their JSON text, so what comes back is what a durable backend
would return (tuples become lists) and a caller mutating a returned value cannot
change the store.

``search(namespace, query)`` is the seed's substring match: only items whose text (a
string value, or the string leaves of a structured one) contains ``query``, compared
case-insensitively; the matches are ordered by the same exact cosine as ``PgMemory``
(then most recent first). ``InMemoryStore(search_mode="ranked")`` instead returns
every item of the namespace ranked against the query, as ``PgMemory`` does; without a
query both list the most recent first.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import numpy as np

from tulip_memory.embeddings import BaseEmbedding, EmbedderLike, HRREncoder, as_embedder
from tulip_memory.embeddings.base import Vectors
from tulip_memory.store.base import BatchFirstStore, BatchItem
from tulip_memory.store.items import SemanticSearchResult, StoreCapabilities, StoreItem
from tulip_memory.store.ranking import (
    cosine_distances,
    json_contains,
    score_of,
    vector_or_none,
)
from tulip_memory.store.validation import (
    ValidWrite,
    validate_key,
    validate_limit,
    validate_namespace,
    validate_query,
    validate_threshold,
    validate_vector,
    validate_write,
)


@dataclass(frozen=True)
class _Row:
    item: StoreItem
    value_json: str
    metadata_json: str
    vector: Vectors | None
    text: str  # casefolded, for the substring match


SearchMode = Literal["substring", "ranked"]


class InMemoryStore(BatchFirstStore):
    """In-memory store: fast, not persistent; for tests and development."""

    def __init__(
        self,
        *,
        embedder: EmbedderLike | None = None,
        dim: int = 512,
        search_mode: SearchMode = "substring",
    ) -> None:
        if search_mode not in ("substring", "ranked"):
            raise ValueError(f"search_mode must be 'substring' or 'ranked', got {search_mode!r}")
        self._encoder: BaseEmbedding = (
            as_embedder(embedder) if embedder is not None else HRREncoder(dim)
        )
        self.search_mode: SearchMode = search_mode
        self._rows: dict[tuple[tuple[str, ...], str], _Row] = {}
        self._lock = threading.Lock()
        self._last_ts = datetime.min.replace(tzinfo=UTC)

    @property
    def capabilities(self) -> StoreCapabilities:
        return StoreCapabilities(
            search=True,
            semantic_search=True,
            embedding_dimension=self._encoder.dimension,
            list_namespaces=True,
            batch_operations=True,
            transactions=True,
        )

    # -- writes -----------------------------------------------------------------

    async def put_with_embedding(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Any,
        embedding: list[float],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        vec = validate_vector(embedding, self._encoder.dimension)
        write = validate_write(namespace, key, value, metadata)
        self._commit([(write, vector_or_none(np.asarray(vec, dtype=np.float32)))])

    async def put_batch(self, items: list[BatchItem]) -> None:
        writes = [validate_write(ns, k, v, md) for ns, k, v, md in items]
        if not writes:
            return
        vectors = await self._encoder.aembed([w.content for w in writes])
        self._commit([(w, vector_or_none(vectors[i])) for i, w in enumerate(writes)])

    def _commit(self, rows: list[tuple[ValidWrite, Vectors | None]]) -> None:
        with self._lock:
            for write, vec in rows:
                ns, key = write.namespace, write.key
                now = self._tick()
                old = self._rows.get((ns, key))
                item = StoreItem(
                    namespace=ns,
                    key=key,
                    value=None,
                    metadata={},
                    created_at=old.item.created_at if old else now,
                    updated_at=now,
                    version=old.item.version + 1 if old else 1,
                )
                text = write.content.casefold()
                self._rows[(ns, key)] = _Row(item, write.value_json, write.metadata_json, vec, text)

    def _tick(self) -> datetime:
        # Strictly increasing timestamps, so recency order is total within a process.
        now = datetime.now(UTC)
        self._last_ts = max(now, self._last_ts + timedelta(microseconds=1))
        return self._last_ts

    async def delete(self, namespace: tuple[str, ...], key: str) -> bool:
        ns, k = validate_namespace(namespace), validate_key(key)
        with self._lock:
            return self._rows.pop((ns, k), None) is not None

    async def clear_namespace(self, namespace: tuple[str, ...]) -> int:
        ns = validate_namespace(namespace)
        with self._lock:
            doomed = [k for k in self._rows if k[0] == ns]
            for k in doomed:
                del self._rows[k]
            return len(doomed)

    # -- reads ------------------------------------------------------------------

    async def get(self, namespace: tuple[str, ...], key: str) -> Any | None:
        item = await self.get_item(namespace, key)
        return None if item is None else item.value

    async def get_item(self, namespace: tuple[str, ...], key: str) -> StoreItem | None:
        ns, k = validate_namespace(namespace), validate_key(key)
        with self._lock:
            row = self._rows.get((ns, k))
        return None if row is None else _materialize(row)

    async def get_embedding(self, namespace: tuple[str, ...], key: str) -> list[float] | None:
        ns, k = validate_namespace(namespace), validate_key(key)
        with self._lock:
            row = self._rows.get((ns, k))
        if row is None or row.vector is None:
            return None
        return [float(x) for x in row.vector]

    async def list_keys(self, namespace: tuple[str, ...], limit: int = 100) -> list[str]:
        ns, limit = validate_namespace(namespace), validate_limit(limit)
        with self._lock:
            keys = sorted(k for n, k in self._rows if n == ns)
        return keys[:limit]

    async def list_namespaces(
        self, prefix: tuple[str, ...] | None = None, limit: int = 100
    ) -> list[tuple[str, ...]]:
        pre = validate_namespace(prefix) if prefix else ()
        limit = validate_limit(limit)
        with self._lock:
            found = {n for n, _ in self._rows if n[: len(pre)] == pre}
        return sorted(found)[:limit]

    async def _search_batch(
        self, tenant: str, nss: list[tuple[str, ...]], query: str | None, limit: int
    ) -> list[list[StoreItem]]:
        qvec = vector_or_none((await self._encoder.aembed([query]))[0]) if query else None
        needle = query.casefold() if query and self.search_mode == "substring" else None
        return [
            [_materialize(r) for r, _ in self._ranked(ns, qvec, limit, containing=needle)]
            for ns in nss
        ]

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
        q = np.asarray(validate_vector(query_embedding, self._encoder.dimension), np.float32)
        ranked = self._ranked(ns, vector_or_none(q), None, metadata_filter, vectors_only=True)
        out: list[SemanticSearchResult] = []
        for row, dist in ranked:
            score = score_of(dist)
            if len(out) >= limit or (threshold is not None and score < threshold):
                break
            out.append(SemanticSearchResult(item=_materialize(row), score=score, distance=dist))
        return out

    async def search_across(
        self,
        namespaces: Sequence[tuple[str, ...]],
        query: str | None = None,
        limit: int = 10,
    ) -> list[SemanticSearchResult]:
        """One ranking over the rows of several namespaces, as ``PgMemory``'s: by cosine
        distance with a query (rows without a vector last, unscored), most recent first
        without one."""
        scope = frozenset(validate_namespace(ns) for ns in namespaces)
        query, limit = validate_query(query), validate_limit(limit)
        if not scope or not limit:
            return []
        qvec = vector_or_none((await self._encoder.aembed([query]))[0]) if query else None
        out = []
        for row, dist in self._ranked(scope, qvec, limit):
            known = qvec is not None and not math.isnan(dist)
            score = score_of(dist) if known else 0.0
            out.append(SemanticSearchResult(_materialize(row), score, dist if known else None))
        return out

    def _ranked(
        self,
        ns: tuple[str, ...] | frozenset[tuple[str, ...]],
        qvec: Vectors | None,
        limit: int | None,
        metadata_filter: dict[str, Any] | None = None,
        *,
        vectors_only: bool = False,
        containing: str | None = None,
    ) -> list[tuple[_Row, float]]:
        """Rows of ``ns`` (whose text contains ``containing``, if given): by cosine
        distance to ``qvec`` (rows without a vector last), then most recent first,
        then key."""
        scope = ns if isinstance(ns, frozenset) else frozenset((ns,))
        with self._lock:
            rows = [r for (n, _), r in self._rows.items() if n in scope]
        if containing is not None:
            rows = [r for r in rows if containing in r.text]
        if metadata_filter:
            rows = [r for r in rows if json_contains(json.loads(r.metadata_json), metadata_filter)]
        if vectors_only:
            rows = [r for r in rows if r.vector is not None]
        rows.sort(key=lambda r: r.item.key)
        rows.sort(key=lambda r: r.item.updated_at, reverse=True)
        if qvec is None:
            return [(r, float("nan")) for r in rows[:limit]]
        with_vec = [r for r in rows if r.vector is not None]
        without = [r for r in rows if r.vector is None]
        dists: list[float] = []
        if with_vec:
            matrix = np.stack([r.vector for r in with_vec if r.vector is not None])
            dists = [float(d) for d in cosine_distances(matrix, qvec)]
        order = sorted(range(len(with_vec)), key=lambda i: dists[i])  # stable: ties keep recency
        ranked = [(with_vec[i], dists[i]) for i in order] + [(r, float("nan")) for r in without]
        return ranked[:limit]


def _materialize(row: _Row) -> StoreItem:
    return replace(
        row.item, value=json.loads(row.value_json), metadata=json.loads(row.metadata_json)
    )

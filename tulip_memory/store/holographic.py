"""``HolographicStore``: durable memory in one SQLite file, no server to run.

Every value is a row (SQLite, WAL), an FTS5 index entry, and, when numpy is installed,
an HRR phase vector (:class:`~tulip_memory.embeddings.HRREncoder`). ``search`` fuses two
rankings of the namespace's rows with reciprocal-rank fusion: HRR associative similarity
and FTS5 bm25. Rows neither ranking picks follow, most recent first, so a search returns
``min(limit, rows)`` items like every backend. Without numpy search is FTS5 + recency.

Text is folded before either index sees it (NFKC, case folding, accents stripped from
Latin and Greek, CJK runs split into character bigrams, emoji kept as terms), and the
FTS5 ``ascii`` tokenizer then splits only where the folding put spaces: Japanese,
accented Greek and emoji are searchable, and user text reaches FTS5 only as quoted terms.

One connection and one lock: every call runs its SQL on a worker thread
(``asyncio.to_thread``) under a ``threading.Lock``, so the store is safe across threads
and event loops and never blocks a loop. Several processes may share a file (WAL, busy
timeout); versions are counted in SQL, so no write is lost between them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import re
import sqlite3
import threading
import unicodedata
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import groupby
from typing import Any, TypeVar

import numpy as np

from tulip_memory.embeddings import HRREncoder
from tulip_memory.embeddings.base import Vectors
from tulip_memory.errors import StoreCapabilityError
from tulip_memory.store.base import BatchFirstStore, BatchItem
from tulip_memory.store.fusion import DEFAULT_K, fuse
from tulip_memory.store.items import SemanticSearchResult, StoreCapabilities, StoreItem
from tulip_memory.store.ranking import (
    cosine_distances,
    json_contains,
    score_of,
    vector_or_none,
)
from tulip_memory.store.validation import (
    MAX_QUERY_TERMS,
    NS_SEP,
    validate_key,
    validate_limit,
    validate_namespace,
    validate_threshold,
    validate_vector,
    validate_write,
)

T = TypeVar("T")
Row = Any  # a tuple from sqlite3: (key, value, metadata, created_us, updated_us, version)

_DEFAULT_DIM = 512
_BUSY_TIMEOUT_S = 10.0
#: Reciprocal-rank fusion: the paper's k, and equal say for the two rankings.
_RRF_K = DEFAULT_K
_HRR_WEIGHT = 1.0
_FTS_WEIGHT = 1.0
#: A row enters the HRR ranking only above this many standard deviations of the
#: similarity of unrelated texts (1/sqrt(width)); below it the order is noise.
_NOISE_SIGMAS = 2.0
#: Query words this long also match as prefixes ("live" finds "lives").
_PREFIX_MIN_LEN = 4
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FTS_ONLY = (
    "HolographicStore: numpy is not installed, so values are stored without HRR vectors, "
    "search is FTS5 lexical match plus recency, and semantic search is unavailable. "
    "Install numpy (pip install numpy) for associative recall."
)

# -- SQL -------------------------------------------------------------------------------

#: Ordered schema migrations; ``PRAGMA user_version`` records how many are applied.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE items (
            id INTEGER PRIMARY KEY,
            ns TEXT NOT NULL,
            key TEXT NOT NULL,
            value TEXT NOT NULL,
            metadata TEXT NOT NULL,
            terms TEXT NOT NULL,
            created_us INTEGER NOT NULL,
            updated_us INTEGER NOT NULL,
            version INTEGER NOT NULL,
            hrr BLOB,
            UNIQUE (ns, key)
        )""",
        "CREATE INDEX items_recent ON items (ns, updated_us DESC, key)",
        """CREATE VIRTUAL TABLE items_fts USING fts5(
            terms, content='items', content_rowid='id', tokenize='ascii'
        )""",
        """CREATE TRIGGER items_ai AFTER INSERT ON items BEGIN
            INSERT INTO items_fts (rowid, terms) VALUES (new.id, new.terms);
        END""",
        """CREATE TRIGGER items_ad AFTER DELETE ON items BEGIN
            INSERT INTO items_fts (items_fts, rowid, terms) VALUES ('delete', old.id, old.terms);
        END""",
        """CREATE TRIGGER items_au AFTER UPDATE ON items BEGIN
            INSERT INTO items_fts (items_fts, rowid, terms) VALUES ('delete', old.id, old.terms);
            INSERT INTO items_fts (rowid, terms) VALUES (new.id, new.terms);
        END""",
        "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ),
)
_ITEM_COLUMNS = "key, value, metadata, created_us, updated_us, version"
_UPSERT = """
INSERT INTO items (ns, key, value, metadata, terms, created_us, updated_us, version, hrr)
VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)
ON CONFLICT (ns, key) DO UPDATE SET
    value = excluded.value, metadata = excluded.metadata, terms = excluded.terms,
    updated_us = MAX(excluded.updated_us, items.updated_us + 1),
    version = items.version + 1, hrr = excluded.hrr
"""
_GET = f"SELECT {_ITEM_COLUMNS} FROM items WHERE ns = ? AND key = ?"
_GET_VALUE = "SELECT value FROM items WHERE ns = ? AND key = ?"
_GET_HRR = "SELECT hrr FROM items WHERE ns = ? AND key = ?"
_DELETE = "DELETE FROM items WHERE ns = ? AND key = ?"
_CLEAR = "DELETE FROM items WHERE ns = ?"
_LIST_KEYS = "SELECT key FROM items WHERE ns = ? ORDER BY key LIMIT ?"
_ALL_NAMESPACES = "SELECT DISTINCT ns FROM items"
_NAMESPACES_UNDER = "SELECT DISTINCT ns FROM items WHERE ns = ? OR (ns > ? AND ns < ?)"
_RECENT = "SELECT key FROM items WHERE ns = ? ORDER BY updated_us DESC, key LIMIT ?"
#: What follows the ranked rows of a query: rows with text first, each part by recency.
_TAIL = """
SELECT key FROM items WHERE ns = ? ORDER BY terms = '', updated_us DESC, key LIMIT ?
"""
_LEXICAL = """
SELECT i.key FROM items_fts JOIN items AS i ON i.id = items_fts.rowid
WHERE items_fts MATCH ? AND i.ns = ?
ORDER BY bm25(items_fts), i.updated_us DESC, i.key LIMIT ?
"""
_VECTORS = """
SELECT key, metadata, hrr FROM items WHERE ns = ? AND hrr IS NOT NULL
ORDER BY updated_us DESC, key
"""
_LAST_UPDATE = "SELECT MAX(updated_us) FROM items"
_META_INIT = "INSERT OR IGNORE INTO meta (name, value) VALUES (?, ?)"
_META_GET = "SELECT value FROM meta WHERE name = ?"


@contextmanager
def _transaction(conn: sqlite3.Connection, mode: str = "DEFERRED") -> Iterator[None]:
    """``BEGIN {mode}`` ... ``COMMIT``, or ``ROLLBACK`` on any error."""
    conn.execute(f"BEGIN {mode}")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def migrate(conn: sqlite3.Connection) -> int:
    """Apply the migrations ``conn``'s database lacks, in one transaction; the version."""
    with _transaction(conn, "IMMEDIATE"):
        current = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if current > len(_MIGRATIONS):
            raise ValueError(
                f"HolographicStore: the database is at schema version {current}, newer "
                f"than this code knows ({len(_MIGRATIONS)}); upgrade tulip-memory"
            )
        for version in range(current + 1, len(_MIGRATIONS) + 1):
            for statement in _MIGRATIONS[version - 1]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version:d}")
    return len(_MIGRATIONS)


# -- lexical terms (pure) ----------------------------------------------------------------

#: A run of kana, CJK ideographs, Hangul syllables: scripts written without spaces.
_CJK_RUN = re.compile(
    "([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\uff66-\uff9f\U00020000-\U0002fa1f]+)"
)
_ASCII_WORD = re.compile(r"[a-z0-9]+")
#: Latin and Greek (with their extended blocks): the scripts whose accents are folded.
_ACCENT_FOLDED = ((0x0000, 0x03FF), (0x1E00, 0x1FFF))
_VARIATION_SELECTORS = ((0xFE00, 0xFE0F), (0xE0100, 0xE01EF))


def _in(ch: str, ranges: Sequence[tuple[int, int]]) -> bool:
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in ranges)


def _is_cjk(ch: str) -> bool:
    return _CJK_RUN.match(ch) is not None


def _fold_char(ch: str) -> str:
    if _in(ch, _VARIATION_SELECTORS):
        return ""
    if not _in(ch, _ACCENT_FOLDED):
        return ch
    return "".join(c for c in unicodedata.normalize("NFD", ch) if not unicodedata.combining(c))


def fold(text: str) -> str:
    """NFKC, case-folded, accents stripped from Latin and Greek letters, variation
    selectors (the invisible U+FE0F of "❤️") dropped."""
    if text.isascii():
        return text.lower()
    return "".join(_fold_char(c) for c in unicodedata.normalize("NFKC", text).casefold())


def _char_kind(ch: str) -> str:
    if ch.isalnum() or unicodedata.category(ch).startswith("M"):
        return "word"
    return "symbol" if unicodedata.category(ch) == "So" else "gap"


def _bigrams(run: str) -> list[str]:
    return [run] if len(run) < 2 else [run[i : i + 2] for i in range(len(run) - 1)]


def _word_terms(word: str) -> list[str]:
    """A word's terms: itself, with any CJK run in it split into character bigrams."""
    terms: list[str] = []
    # Split on a capturing group: the odd parts are the CJK runs.
    for i, part in enumerate(_CJK_RUN.split(word)):
        if part:
            terms.extend(_bigrams(part) if i % 2 else [part])
    return terms


def lexical_terms(text: str) -> list[str]:
    """The terms ``text`` is indexed and queried by: folded words, CJK bigrams, emoji.

    A term holds only ASCII letters and digits and non-ASCII characters, all of which
    the FTS5 ``ascii`` tokenizer reads as token characters: a term is one FTS5 token.
    """
    if text.isascii():
        return _ASCII_WORD.findall(text.lower())  # the same terms, fast
    terms: list[str] = []
    for kind, chars in groupby(fold(text), key=_char_kind):
        if kind == "word":
            terms.extend(_word_terms("".join(chars)))
        elif kind == "symbol":
            terms.extend(chars)
    return terms


def _fts_phrase(term: str) -> str:
    quoted = '"' + term.replace('"', '""') + '"'
    prefix = len(term) == 1 if _is_cjk(term[0]) else len(term) >= _PREFIX_MIN_LEN
    return quoted + "*" if prefix else quoted


def fts_query(text: str) -> str | None:
    """A safe FTS5 ``MATCH`` expression for user text: its distinct terms, each quoted,
    OR-ed together (long words and single CJK characters also as prefixes), the first
    :data:`MAX_QUERY_TERMS` of a long message; ``None`` when the text has no terms (only
    punctuation, say)."""
    terms = list(dict.fromkeys(lexical_terms(text)))[:MAX_QUERY_TERMS]
    return " OR ".join(_fts_phrase(t) for t in terms) if terms else None


# -- rows (pure) -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Write:
    """One validated write: ``ns`` joined, JSON texts, folded terms, vector bytes."""

    ns: str
    key: str
    value: str
    metadata: str
    terms: str
    vector: bytes | None = None


def _prepare(namespace: Any, key: Any, value: Any, metadata: Any) -> _Write:
    w = validate_write(namespace, key, value, metadata)
    terms = " ".join(lexical_terms(w.content))
    return _Write(NS_SEP.join(w.namespace), w.key, w.value_json, w.metadata_json, terms)


def _blob(vec: Vectors) -> bytes | None:
    """A vector's float32 bytes, or ``None`` for the all-zero encoding of no text."""
    return vec.astype(np.float32).tobytes() if bool(np.any(vec)) else None


def _micros(dt: datetime) -> int:
    return (dt - _EPOCH) // timedelta(microseconds=1)


def _datetime(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _item(ns: tuple[str, ...], row: Row) -> StoreItem:
    key, value, metadata, created_us, updated_us, version = row
    return StoreItem(
        namespace=ns,
        key=key,
        value=json.loads(value),
        metadata=json.loads(metadata),
        created_at=_datetime(created_us),
        updated_at=_datetime(updated_us),
        version=version,
    )


def _namespace_bounds(prefix: tuple[str, ...]) -> tuple[str, str, str]:
    """``(exact, low, high)``: the names strictly between low and high lie under it."""
    name = NS_SEP.join(prefix)
    return name, name + NS_SEP, name + chr(ord(NS_SEP) + 1)


# -- reads over a connection -------------------------------------------------------------


def _row(conn: sqlite3.Connection, ns: str, key: str) -> Row | None:
    return conn.execute(_GET, (ns, key)).fetchone()


def _rows(conn: sqlite3.Connection, ns: str, keys: Sequence[str]) -> list[Row]:
    """The item rows of ``keys`` that exist, in the order given."""
    found = (_row(conn, ns, k) for k in keys)
    return [row for row in found if row is not None]


def _lexical(conn: sqlite3.Connection, ns: str, match: str, depth: int) -> list[str]:
    return [r[0] for r in conn.execute(_LEXICAL, (match, ns, depth))]


def _recent(conn: sqlite3.Connection, ns: str, limit: int, *, text_first: bool) -> list[str]:
    return [r[0] for r in conn.execute(_TAIL if text_first else _RECENT, (ns, limit))]


def _by_distance(
    conn: sqlite3.Connection, ns: str, query: Vectors, metadata_filter: dict[str, Any] | None
) -> list[tuple[str, float]]:
    """``(key, cosine distance)`` of the rows with a vector, nearest first; ties keep
    recency order."""
    rows = conn.execute(_VECTORS, (ns,)).fetchall()
    if metadata_filter:
        rows = [r for r in rows if json_contains(json.loads(r[1]), metadata_filter)]
    if not rows:
        return []
    matrix = np.stack([np.frombuffer(r[2], dtype=np.float32) for r in rows])
    dists = cosine_distances(matrix, query)
    return [(rows[i][0], float(dists[i])) for i in np.argsort(dists, kind="stable")]


def _complete(ranked: list[str], recent: list[str], limit: int) -> list[str]:
    """``ranked`` topped up with the most recent keys it lacks, to ``limit`` keys."""
    seen = set(ranked)
    return (ranked + [k for k in recent if k not in seen])[:limit]


# -- the store ---------------------------------------------------------------------------


def _numpy() -> Any:
    """numpy, or ``None`` when it is not installed (the FTS5-only mode)."""
    return np if importlib.util.find_spec("numpy") is not None else None


class HolographicStore(BatchFirstStore):
    """Local SQLite + FTS5 + HRR store: zero external infrastructure.

    ``path`` is a database file (created if missing) or ``":memory:"``. ``dim`` is the
    HRR phase count; vectors are ``2 * dim`` floats, and a file keeps the ``dim`` it was
    created with.
    """

    def __init__(self, path: str = ":memory:", *, dim: int = _DEFAULT_DIM) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self._vdim = 2 * dim
        self._encoder = HRREncoder(dim) if _numpy() is not None else None
        if self._encoder is None:
            warnings.warn(_FTS_ONLY, RuntimeWarning, stacklevel=2)
        self._floor = _NOISE_SIGMAS / math.sqrt(self._vdim)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = _connect(path)
        try:
            migrate(self._conn)
            _check_dim(self._conn, dim)
            self._last_us = int(self._conn.execute(_LAST_UPDATE).fetchone()[0] or 0)
        except BaseException:
            self._conn.close()
            raise

    @property
    def capabilities(self) -> StoreCapabilities:
        vectors = self._encoder is not None
        return StoreCapabilities(
            search=True,
            semantic_search=vectors,
            embedding_dimension=self._vdim if vectors else None,
            list_namespaces=True,
            batch_operations=True,
            transactions=True,
        )

    # -- plumbing -------------------------------------------------------------------

    def _locked(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._conn is None:
                raise RuntimeError("HolographicStore is closed")
            return fn(self._conn)

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` on a worker thread, under the lock."""
        return await asyncio.to_thread(self._locked, fn)

    def _tick(self) -> int:
        # Strictly increasing, so recency order is total within a connection.
        self._last_us = max(_micros(datetime.now(UTC)), self._last_us + 1)
        return self._last_us

    def _require_vectors(self) -> None:
        if self._encoder is None:
            raise StoreCapabilityError(
                capability="semantic_search",
                store_class=type(self).__name__,
                hint="Install numpy: without it HolographicStore keeps no vectors.",
            )

    def _query_vector(self, query: str) -> Vectors | None:
        if self._encoder is None:
            return None
        vec = self._encoder.embed([" ".join(lexical_terms(query))])[0]
        return vector_or_none(vec)

    # -- writes ---------------------------------------------------------------------

    async def put_with_embedding(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: Any,
        embedding: list[float],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self._require_vectors()
        vec = np.asarray(validate_vector(embedding, self._vdim), dtype=np.float32)
        row = replace(_prepare(namespace, key, value, metadata), vector=_blob(vec))
        await self._call(lambda conn: self._write(conn, [row]))

    async def put_batch(self, items: list[BatchItem]) -> None:
        """Every item in one SQLite transaction: all are written or none."""
        rows = [_prepare(ns, k, v, md) for ns, k, v, md in items]
        if rows:
            await asyncio.to_thread(self._encode_and_write, rows)

    def _encode_and_write(self, rows: list[_Write]) -> None:
        # Encode before taking the lock: CPU work need not hold up other calls.
        if self._encoder is not None:
            vectors = self._encoder.embed([r.terms for r in rows])
            rows = [replace(r, vector=_blob(vectors[i])) for i, r in enumerate(rows)]
        self._locked(lambda conn: self._write(conn, rows))

    def _write(self, conn: sqlite3.Connection, rows: list[_Write]) -> None:
        with _transaction(conn, "IMMEDIATE"):
            for r in rows:
                now = self._tick()
                conn.execute(
                    _UPSERT, (r.ns, r.key, r.value, r.metadata, r.terms, now, now, r.vector)
                )

    async def delete(self, namespace: tuple[str, ...], key: str) -> bool:
        args = (NS_SEP.join(validate_namespace(namespace)), validate_key(key))
        return await self._call(lambda conn: conn.execute(_DELETE, args).rowcount > 0)

    async def clear_namespace(self, namespace: tuple[str, ...]) -> int:
        ns = NS_SEP.join(validate_namespace(namespace))
        return await self._call(lambda conn: int(conn.execute(_CLEAR, (ns,)).rowcount))

    # -- reads ----------------------------------------------------------------------

    async def get(self, namespace: tuple[str, ...], key: str) -> Any | None:
        item = await self.get_item(namespace, key)
        return None if item is None else item.value

    async def get_item(self, namespace: tuple[str, ...], key: str) -> StoreItem | None:
        ns, k = validate_namespace(namespace), validate_key(key)
        row = await self._call(lambda conn: _row(conn, NS_SEP.join(ns), k))
        return None if row is None else _item(ns, row)

    async def get_batch(
        self, keys: list[tuple[tuple[str, ...], str]]
    ) -> dict[tuple[tuple[str, ...], str], Any]:
        """Every value in one read transaction; missing keys are left out."""
        checked = [(validate_namespace(ns), validate_key(k)) for ns, k in keys]
        if not checked:
            return {}
        args = [(NS_SEP.join(ns), k) for ns, k in checked]

        def read(conn: sqlite3.Connection) -> list[Row]:
            with _transaction(conn):
                return [conn.execute(_GET_VALUE, a).fetchone() for a in args]

        rows = await self._call(read)
        return {pair: json.loads(r[0]) for pair, r in zip(checked, rows, strict=True) if r}

    async def get_embedding(self, namespace: tuple[str, ...], key: str) -> list[float] | None:
        self._require_vectors()
        args = (NS_SEP.join(validate_namespace(namespace)), validate_key(key))
        row = await self._call(lambda conn: conn.execute(_GET_HRR, args).fetchone())
        if row is None or row[0] is None:
            return None
        return [float(x) for x in np.frombuffer(row[0], dtype=np.float32)]

    async def list_keys(self, namespace: tuple[str, ...], limit: int = 100) -> list[str]:
        args = (NS_SEP.join(validate_namespace(namespace)), validate_limit(limit))
        return await self._call(lambda conn: [r[0] for r in conn.execute(_LIST_KEYS, args)])

    async def list_namespaces(
        self, prefix: tuple[str, ...] | None = None, limit: int = 100
    ) -> list[tuple[str, ...]]:
        """Namespaces under ``prefix`` (every one without), sorted as tuples."""
        limit = validate_limit(limit)
        if prefix:
            bounds = _namespace_bounds(validate_namespace(prefix))
            names = await self._call(lambda c: c.execute(_NAMESPACES_UNDER, bounds).fetchall())
        else:
            names = await self._call(lambda c: c.execute(_ALL_NAMESPACES).fetchall())
        # Sorted here, not in SQL: joined names sort unlike tuples when a part holds a
        # character below the separator.
        return sorted(tuple(r[0].split(NS_SEP)) for r in names)[:limit]

    async def _search_batch(
        self, tenant: str, nss: list[tuple[str, ...]], query: str | None, limit: int
    ) -> list[list[StoreItem]]:
        """Every namespace in one read transaction (``search_many`` answers a limit
        under 1 itself)."""
        names = [NS_SEP.join(ns) for ns in nss]
        found = await asyncio.to_thread(self._search_rows, names, query or "", limit)
        return [[_item(ns, r) for r in rows] for ns, rows in zip(nss, found, strict=True)]

    def _search_rows(self, names: list[str], query: str, limit: int) -> list[list[Row]]:
        match = fts_query(query)
        qvec = self._query_vector(query)

        def read(conn: sqlite3.Connection) -> list[list[Row]]:
            with _transaction(conn):
                return [_rows(conn, n, self._ranked(conn, n, match, qvec, limit)) for n in names]

        return self._locked(read)

    def _ranked(
        self,
        conn: sqlite3.Connection,
        ns: str,
        match: str | None,
        qvec: Vectors | None,
        limit: int,
    ) -> list[str]:
        """Keys of ``ns``: the HRR and FTS5 rankings fused, then the rest, most recent
        first (with a query, rows that have text before rows that have none).

        Each ranking is cut at ``k + 2 * limit``: a row below that in both scores under
        ``2 / (2k + 2 limit)``, less than any row in the top ``limit`` of either, so it
        could not make the top ``limit``.
        """
        depth = _RRF_K + 2 * limit
        lexical = _lexical(conn, ns, match, depth) if match else []
        associative: list[str] = []
        if qvec is not None:
            near = _by_distance(conn, ns, qvec, None)
            associative = [k for k, d in near if 1.0 - d > self._floor][:depth]
        fused = fuse([associative, lexical], k=_RRF_K, weights=(_HRR_WEIGHT, _FTS_WEIGHT))
        if len(fused) >= limit:
            return fused[:limit]
        ranking = bool(match) or qvec is not None
        return _complete(fused, _recent(conn, ns, limit, text_first=ranking), limit)

    async def search_by_embedding(
        self,
        namespace: tuple[str, ...],
        query_embedding: list[float],
        limit: int = 10,
        threshold: float | None = None,
        metadata_filter: dict[str, Any] | None = None,
    ) -> list[SemanticSearchResult]:
        self._require_vectors()
        ns = validate_namespace(namespace)
        threshold, limit = validate_threshold(threshold), validate_limit(limit)
        q = np.asarray(validate_vector(query_embedding, self._vdim), dtype=np.float32)
        if not limit or not np.any(q):
            return []
        name = NS_SEP.join(ns)

        def read(conn: sqlite3.Connection) -> list[tuple[Row, float]]:
            with _transaction(conn):
                near = _by_distance(conn, name, q, metadata_filter)
                kept = [(k, d) for k, d in near if threshold is None or score_of(d) >= threshold]
                found = ((_row(conn, name, k), d) for k, d in kept[:limit])
                return [(row, d) for row, d in found if row is not None]

        found = await self._call(read)
        return [SemanticSearchResult(_item(ns, row), score_of(d), d) for row, d in found]

    async def close(self) -> None:
        """Close the connection (idempotent); later calls raise ``RuntimeError``."""
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _connect(path: str) -> sqlite3.Connection:
    """One connection for every thread (the store's lock serialises it), in autocommit
    mode so transactions are explicit, with WAL for readers beside a writer."""
    conn = sqlite3.connect(
        path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def _check_dim(conn: sqlite3.Connection, dim: int) -> None:
    """Record the file's HRR ``dim`` on first open; refuse a different one later."""
    with _transaction(conn, "IMMEDIATE"):
        conn.execute(_META_INIT, ("hrr_dim", str(dim)))
        stored = int(conn.execute(_META_GET, ("hrr_dim",)).fetchone()[0])
    if stored != dim:
        raise ValueError(
            f"HolographicStore: this database was created with dim={stored}; open it with "
            f"dim={stored} (its stored vectors are {2 * stored} floats wide), not dim={dim}"
        )

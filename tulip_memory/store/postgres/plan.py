"""Which path a hybrid recall takes: the exact scan of its scope, or the indexes.

Small scopes take the exact path (``sql._hybrid``): every row's bm25 and cosine,
computed over the rows the ``(tenant, ns, ...)`` B-tree yields. It is exact, complete
and cheap while the scope is small, and its cost grows with the scope's rows.

Bigger scopes take the index path (``sql._indexed``): candidates from the postings
table ``<table>_post`` (one row per lexeme of each row: its keys, ``tf`` and ``dl``,
kept by triggers in the writer's transaction, read by an index-only scan of its
primary key) and the scope's nearest rows, ranked by the exact path's own scores. The
store chooses it from the scope's row count, kept exact by triggers in
``<table>_ns_stats`` / ``<table>_turns_ns_stats``, when the server can run it
(pgvector >= 0.8, iterative index scans) and the scope holds at least
:data:`INDEX_MIN_ROWS` rows. The nearest rows come one of two ways
(``sql.nearest``, :func:`choose`):

- :data:`INDEX`: from the HNSW index (an iterative scan), where the scope is enough
  of its table (the planner estimate ``pg_class.reltuples``; the graph spans every
  tenant) for the scan to find them within ``max_scan_tuples`` and at less cost than
  reading the scope's vectors: it reads about ``ef_search / share`` tuples, the other
  scopes' ones included (:data:`HNSW_COST`);
- :data:`OWN`: from the namespace's own graph, a partial HNSW index over its rows
  alone, where the operator's ``tulip-memory graphs`` built one (a table's biggest
  namespaces that are a small share of it: :mod:`tulip_memory.reindex.graphs`): the
  scope is then its graph's whole table;
- :data:`SCAN`: from the scope's own rows, read by its B-tree range with each
  cosine computed in full precision and a top-N sort: exact, complete, and linear in
  the scope at a fifth of the exact path's cost a row (it reads no ``tsvector``).

When the graph's scan still comes back short (the scope's vectors are rarer in the
index than expected), the store reads the scope's own vectors instead
(:func:`ways`), and runs the exact path when that is short too (no query vector):
recall stays complete.

The lexical side. bm25 needs every lexical match of the scope (its ``df`` and its
normalising maximum). A match's row of the memories or turns table is ~1.7 KB (vector,
text, metadata), so they are never read for it: the postings table's primary key
``(tenant, ns, lexeme, keys) INCLUDE (tf, dl[, created_at])`` yields each query
lexeme's postings in the scope, with all bm25 needs, from an index-only scan (no
``tsvector`` is read or filtered), and only the candidates' wide rows are read: the
:func:`lexical_candidates` best by bm25, the nearest rows, and every other match
whose fused score could still reach the top ``limit``, bounded above by its bm25
plus the cosine of the farthest of the nearest (a row nearer than that would be
among them, as far as the HNSW graph finds it; the scope's scan finds every one). So
the ranking stays the exact path's up to the graph's misses (it is the exact path's
when the nearest rows come from the scan), and a query whose matches tie on bm25 (the same
lexemes, the same length) reads the tied ones it needs, not all of them.

Why no operator needs to be leakproof. Under ``FORCE ROW LEVEL SECURITY`` the planner
evaluates a query's own condition below the policy's, and so as an index condition,
only when the condition's function is leakproof. ``tsvector @@ tsquery``
(``ts_match_vq``) is not, so the GIN index that ``tsv @@ q`` once used was out of the
application role's reach unless a superuser marked it ``LEAKPROOF`` for the whole
database (a step managed Postgres services do not allow). The index path tests no
``@@`` any more: its lexical condition is text equality on the postings' key, and its
vectors' ``<=>`` is pgvector's operator of the HNSW index's ordering, not a filter
(``tests/store/test_recall_plan.py`` reads both indexes under forced row-level
security on a server where ``@@`` is not leakproof). The exact path tests ``@@`` in a
``CASE`` of its select list, over rows the policy has already admitted.

Thresholds, measured with ``bench/recall.py --full --nearest`` (1,000,000 memories
over 10,000 namespaces; 384-d hashing vectors, 2 shared cores, warm buffers,
2026-12-06). The nearest rows alone: :data:`HNSW_COST`. The whole search, through
``PgMemory.search`` (p50 of 15-20 queries a namespace, interleaved): the exact path
13.6 ms at 2,993 rows, 11.9 at 2,546, 11.0 at 2,215, 10.7 at 1,961, 8.8 at 1,595,
7.3 at 1,088, 4.9 at 693, against 11.4, 8.1, 8.2, 8.7, 8.5, 7.4 and 8.6 with the
nearest rows from the scope's scan (a floor of ~7 ms: planning ~2, the statement's
other reads, the round trips), so :data:`INDEX_MIN_ROWS` is 2,000; at 5,074 rows 23
against 10, at 10,114 41-46 against 15-16, at 25,171 103-121 against 27-34. A generic
plan of the index statement (``plan_cache_mode`` left to Postgres, which took it
after five executions) sorted those scopes' rows another way: 37-468 ms where the
custom plan took 10-27, so every index-path statement is planned for its parameters
(``sql.PLAN_SETTINGS``).

Before the scope's scan (until 2026-12-06), a scope too small a share of its table
for the graph took the exact path, up to about 28,000 rows of a million-row table:
the 10k-100k class of ``bench/recall.py --full`` ran at 56-58 ms p50, 4.4-5.6x
PostgresStore's, 30 of its 40 queries exact.

Where the table's graph does not scale. One HNSW graph spans the whole table, so a scope's
share of the table, not its size, decides what its nearest rows cost: a namespace
that is a small share of a big table reads its own vectors, linear at ~0.7 us a row
(20,000 rows: ~15 ms; a heavy user's 200,000 turns among a production table of many
users' turns, where the graph cannot find them within ``max_scan_tuples``: ~130 ms).
What bounds that is a graph per part of the table: hash partitions on ``ns`` (every
namespace whole in one partition, each partition's graph over 1/P of the rows, so a
scope's share grows about P times). Measured on a copy of ``bench/recall.py
--full``'s memories partitioned 16 ways by ``hash(ns)`` (2026-12-06, as the owner,
graphs just built): the nearest 20 rows of the 100,000-row namespace (62% of its
partition) 3.8 ms, of 50,171 rows (61%) 3.8, of 33,514 (28%) 5.5, of 25,171 (21%)
6.3, of 20,159 (22%) 6.2, of 14,423 (24%) 5.1, of 11,232 (12%) 9.7, against the one
graph's 13.5-46 ms and the scan's 9.9-74 ms above. Not built: it rebuilds both
tables as partitioned ones (a migration that rewrites every row), and the reindex's
``CREATE INDEX CONCURRENTLY`` must then run per partition and attach (Postgres builds
no partitioned index concurrently); the 16 graphs took 720 s to build against 527
for the one. Built instead (2026-12-06): a graph of its own for each of the few
namespaces that need one (:data:`OWN`, :mod:`tulip_memory.reindex.graphs`), a
partial index over its rows, built and dropped online with no table rewritten, which
makes the namespace its graph's whole table (pgvector's own advice for a filter of
few distinct values). ``bench/recall.py --full --nearest`` with them (the ten
namespaces of 10,000-100,000 rows, built in 227 s): the 100,000-row namespace's nearest
20 rows 3.8 ms from its own graph against 24.3 from the table's (that run) and 83.6
from its scan, 50,171 rows 2.4 against 35.1 and 40.9, 12,629 rows 1.5 against 59.0 and
9.7; the whole search (``--queries 100 --warm 100``) 100k+ p50 10.1-10.8 ms, 1.01-1.30x
PostgresStore's, against 20.4 ms, 2.66x, without them.

What the index path costs, and what was weighed (200,000 memories over 2,000
namespaces and a 200,000-turn namespace, the embedded server, host load 3-6 on 2
shared cores).

Before the postings (migration 16's narrow ``<table>_lex`` with a GIN index on
``tsv``), EXPLAIN (ANALYZE, BUFFERS) of warm ``search_turns``: 2,428 matches from the
GIN index in 6.8 ms, ``ts_filter`` of each ``tsv`` 8.5 ms, df and bm25 5.5 ms (the
lexical side 22 ms), the HNSW nearest 10 ms, 36-38 ms in all under EXPLAIN.

With the postings (migration 17, which replaces ``<table>_lex``): the 2,348-2,385
postings of a query's 4 lexemes from an index-only scan in 1.0-1.9 ms (40-55
buffers), df 1 ms, bm25 and the 100 best 2.5-4 ms: the lexical side 4.6-6.1 ms. The
HNSW nearest (40, ``ef_search`` 40) are now the biggest part: 8.6-14.7 ms for
2,500-2,900 buffer hits; the candidates' wide rows 2 ms; planning 1.3-3.9 ms. Timed
``search_turns`` right after the bench's exact pass over the turns (each round trip
of the call timed: the pin, counters and settings are 0.1-0.5 ms each, the rest is
the statement): p50 22 ms, p99 54 ms, against p50 50, p99 494 before on the same rows.
The postings cost a row per distinct lexeme of each row written (1.8 and 2.0 million
for 200,000 memories and 220,100 turns: 261 and 387 MB with their primary keys,
against 59 and 70 MB for the narrow tables); migration 17 filled them on those rows
in 46 s. A query touches ~50 of their index pages, so they weigh little in the cache.

Where the p99 goes. Shared-buffer misses, not planning nor the lexical side: with 2
GB of ``shared_buffers`` and 3.1 GB of tables and indexes (the bench's, with
PostgresStore's), the exact reference pass (an index scan of the namespace's wide
rows, no ring buffer) and the memories' queries evict the turns' HNSW pages, and a
query that reads its ~2,800 graph buffers back from the OS cache takes 100-600 ms
(bench.recall, ``search_turns`` 100k+: p50 97, p99 358 ms on 2 GB, the postings
in; the turns' exact pass alone, without the memories' queries: p99 494 ms before
them, 54 ms with them, as above). The same rows on the same server with 6 GB of
``shared_buffers`` (a quarter of the machine's 24 GB, PostgreSQL's own starting
point for a database server; everything fits): the first run after the restart, every
page read once from the OS, p50 39 / p99 1,007 ms; the next run, the buffers as a
server in use keeps them, p50 19.5 / p99 26.9 ms (load 1.3-2.8), 100% complete,
recall@10 0.998. So with the cache fitting, the statement itself was the p99, and its
largest part the HNSW scan (8.6-14.7 ms of the ~20 under EXPLAIN).

Then (migration 19 and after): the HNSW indexes hold each slot as ``halfvec(dim)``
(``slots.ann_expr``; 223 and 246 MB against 391 and 430 MB for the memories' and the
turns' graphs, 2.8 GB of tables and indexes in all against 3.1), the index proposes
``2 * limit`` nearest rows from one pass of ``ef_search`` 40 (:func:`candidates`), and
the embedded server keeps a quarter of the memory in its buffers. The vector side of
a warm statement alone: 1.6 ms p50 against 3.0 for 40 candidates. ``bench.recall`` on
the same rows, this code against the one before, each warm (40 queries a class, load
1-5 on 2 shared cores):

- 2 GB of buffers: ``search_turns`` 100k+ p50 8.3-9.3 / p99 13.2-15.2 ms against
  12.6 / 37.1 (29.9 right after the load); memories 100k+ p50 7.5 ms against
  9.9-13.2, 1.62-1.76x PostgresStore's against 1.17-1.33x (PostgresStore's own p50 went
  from 8.5-9.9 to 4.3-4.6 ms: its graph now stays in the buffers our smaller ones
  leave);
- 6 GB (three runs against two): ``search_turns`` p50 7.6-8.4 / p99 10.6-12.2 ms
  against 10.5-11.1 / 16.8-19.5; memories 6.7-7.1 ms, 1.70-1.75x PostgresStore's,
  against 8.8-9.5 ms, 2.16-2.29x. The first run after a restart still reads every
  page from the OS once (p99 108 ms).

100% complete, recall@10 0.993-1.000 against the exact path, self-hit@10 1.00, in
every run. The exact path is unchanged (full-precision cosine); the index path
recomputes each candidate's cosine on the full-precision column, so halfvec only
moves which rows the graph proposes.

- ``shared_buffers``: the embedded server sizes it from the machine
  (:mod:`tulip_ops.dev.server_settings`); 128 MB -> 1 GB halved the p50.
- bounding the lexical candidates without a bound: the 100 best by bm25 alone gave
  recall@10 0.62 against the exact path on ``tests/store/test_recall_plan.py``'s
  namespace (ties on bm25 broken by key, not by cosine); with the bound, 1.0.
- the postings' index-only scans need the visibility map, which vacuum keeps
  (autovacuum's insert threshold does, for tables that grow); pages not yet
  all-visible are read from the heap, which costs time, not correctness.

Where a warm statement's time goes now, and where it does not scale. Variants of
``search_turns``' statement timed interleaved on the same 20 queries of the
200,000-turn namespace (the app role, one transaction; 2 shared cores, 2026-12-03),
p50: the whole statement 11.4-11.9 ms; parsing, planning and starting it ~2; the
postings' index-only scan ~1.4; joining ``df`` ~1 and grouping by row ~1 (their
arithmetic ~0.5; a window for ``df`` was slower); the HNSW nearest ~2.8; reading the
candidates' wide rows and ranking them the rest. So the lexical side follows the
query's postings: queries of 2, 4, 8, 16 and 32 random bench words (~600 postings a
word) took p50 12.8, 15.6, 20.4, 29.1 and 41.4 ms. ``bench/recall.py``'s words are
uniform over 3,000, so a query of four matches ~1% of the rows; four words of a real
turn match ~15% (p50 over LoCoMo's 5,882 turns; p90 ~30%: "great", "thank",
"realli", "like" are each in 13-19% of them). With ``--turn-texts`` (the turns are
LoCoMo's utterances) ``search_turns`` on 200,000 turns took p50 33-45 / p99 128-162
ms (four runs). Each lexeme's postings are now streamed into the sum by row, its
``df`` counted by a second index-only scan (the join of the postings with ``df`` is
gone): p50 31-38 / p99 93-116 ms on those rows (three runs, interleaved with the
code before), recall@10 0.983 as before; on the uniform ones p50 13.8-14.4 / p99
19.5-21.7 against 12.3-16.1 / 23.1-27.9. So the tail moved, the median stayed within
the host's noise. The scores by row were then read four times more (their maximum,
the best 100, the nearest rows' bm25, the matches whose bound reaches the top k); now
once (``sql._indexed``): interleaved twice with the code before, real utterances p50
31.8 / 22.9 against 39.8 / 35.8 ms, p99 107.8 / 77.0 against 144.2 / 119.4; uniform
words p99 26.8 / 18.2 against 31.3 / 24.9; recall@10 unchanged (0.983, 0.998), the same
answers on 20 queries of each. Real text stays 1-5x over the 20 ms target (p50, p99
on a host whose speed moves 1.5x between runs).

Then (migration 20): each lexeme's ``df`` in a scope is a counter
(``<table>_df``, ``<table>_turns_df``: ``df``, the most positions ``tf_max`` and the
fewest lexemes ``dl_min`` of its postings, kept by statement triggers on the postings
after the scope's ``_ns_stats`` row is locked, so concurrent writers of a namespace
queue rather than deadlock), so no posting is read to count it; and the common
lexemes are cut MaxScore-style (``sql._indexed``): the rarest lexemes whose postings
add up to :data:`ESSENTIAL_POSTINGS` are streamed and summed; a row must match one of
them to reach the top unless the others' bm25 upper bounds (from ``tf_max`` and
``dl_min``) add up to more than the ``lexical_candidates``-th best partial sum; the
rows that can still reach it have the others' postings looked up by key (when that
costs less than streaming them, :data:`LOOKUP_COST`), and the full stream runs only
when the cut cannot be shown to hold. With ``--turn-texts`` on 200,000 turns: p50
17.6 / p99 110 ms against 27.4 / 158 (the counters without the bounds) and 30.1 / 124
(the code before), recall@10 0.988, 100% complete. Of 60 real queries (EXPLAIN
ANALYZE), the cut held on 24 (median ~15 ms), failed on 3 and was not tried on 33,
whose lexemes are all common (each in over 4,000 of the scope's turns: "great",
"like", "realli"): those stream every posting (~50,000, p50 ~50-55 ms: the index-only
scan ~15, the rest materialising and grouping them by row) and make the tail.
Grouping by key without the namespace measured the same (68.5 against 68.7 ms) and
was not kept. Bounding the all-common queries needs postings ordered by impact (a
second index on ``(tenant, ns, lexeme, tf/dl)``, read best-first to a threshold);
not built.

Then the cut's completion by one stream (``sql._indexed``'s ``joined``): a query whose
rare lexemes match thousands of rows ("like back better": 3,380 partial matches, two
common lexemes) looked up 6,760 postings by key, 7-15 us each (47-84 ms), where
streaming the common lexemes' 31,000 postings through a hashed semi-join with the
partial matches, nothing summed outside them, took 22 ms. On 100 LoCoMo queries over
200,000 turns (two interleaved runs against the code before, quiet host): p50 19.1 /
19.1 against 21.4 / 21.7 ms, mean 26.0 / 26.9 against 26.7 / 29.7; the worst of the
cut's queries 27 against 39-43 ms. The 31 queries made only of common lexemes (no
lexeme under :data:`ESSENTIAL_POSTINGS`) still stream every posting, 43-48 ms on
average. Impact ordering does not bound those either: their best rows hold three or
four of the query's common words at a typical weight each, so no prefix of any
lexeme's postings by impact reaches a threshold before most of them are read (the
threshold algorithm's stop needs the sum of the prefixes' last impacts under the
k-th score); and the vector side does not stand in for them (lexical candidates from
the rare lexemes and the 20 nearest rows only: recall@10 0.76 against the exact
path). Postgres's executor costs 0.13 us a posting to scan and ~0.5 more to sum or
probe by row key, so such a query's ~50,000 postings cost what they cost here; a
native BM25 index (block-max WAND in the server) is what would bound them. Summing
them in key order instead (each lexeme's postings are in key order in the index: a
Merge Append of one index scan per lexeme into a GroupAggregate, hash aggregation
off) took 38.5 against 63.5 ms for the hashed sum of "also awesome thanks"'s 62,508
postings; not adopted: it needs a branch per query lexeme written into the statement
(up to :data:`~tulip_memory.store.validation.MAX_QUERY_TERMS`), planned for every
query, and it still leaves such a query at twice the target.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

#: Scopes with fewer rows take the exact path.
INDEX_MIN_ROWS = 2_000
#: ``hnsw.max_scan_tuples`` of an index-path statement (pgvector's default).
MAX_SCAN_TUPLES = 20_000
#: pgvector's bound on ``hnsw.ef_search``.
MAX_EF_SEARCH = 1_000
#: At least this many lexical candidates (:func:`lexical_candidates`), and this many
#: per result.
LEXICAL_CANDIDATES = 100
LEXICAL_PER_RESULT = 10
#: The postings the index path streams before it scores any lexical match in full:
#: the rarest query lexemes whose postings add up to at most this many (the others are
#: looked up by key, see ``sql._indexed``).
ESSENTIAL_POSTINGS = 4_000
#: What completing the essential lexemes' partial matches costs, in postings streamed
#: and summed by row: a posting looked up by key (per match and lexeme), and a posting
#: streamed and probed against the matches (per posting of the other lexemes).
LOOKUP_COST = 4
JOIN_COST = 0.5
#: How long a table's planner estimate of its rows is reused.
TABLE_ROWS_TTL = 60.0

EXACT = "exact"
INDEX = "index"
OWN = "own"
SCAN = "scan"
FALLBACK = "fallback"


def candidates(limit: int) -> int:
    """How many nearest rows the HNSW index proposes for ``limit`` results. Every
    lexical match is scored anyway; among the rows matching no query lexeme the fused
    score follows the cosine alone, so the index needs to find only their ``limit``
    nearest: twice that leaves room for the lexical matches among the nearest. An
    iterative scan returns up to ``ef_search`` tuples a pass, of which the scope keeps
    its share: 20 candidates of a scope that is half its table come from one pass of
    ``ef_search`` 40, where 40 took two (the HNSW side of ``bench/recall.py``'s
    100,000-row namespace: 1.6 against 3.0 ms p50 warm)."""
    return min(MAX_EF_SEARCH, max(20, 2 * limit))


def ef_search(limit: int) -> int:
    """``hnsw.ef_search`` of an index-path statement: the graph search's breadth, at
    least pgvector's default of 40 (what LangGraph's PostgresStore runs), twice the
    candidates. 100 cost the turns' index path 1.4x as much for the same top 10 on
    ``bench/recall.py``'s 50,000-turn namespace."""
    return min(MAX_EF_SEARCH, max(40, 2 * candidates(limit)))


def lexical_candidates(limit: int) -> int:
    """How many of the best lexical matches by bm25 have their wide rows read first
    (every match is scored by bm25 on the narrow lexical table); the statement reads
    any other match whose bound can still reach the top ``limit`` after them, so this
    trades wide rows read up front against a second read, and covers the HNSW graph's
    misses among the lexical matches (the bound trusts the graph). 30 (3 a result)
    read 49-68 wide rows a query where 100 read 119-124 on ``bench/recall.py``'s
    200,000-turn namespace: ~1 ms less of ~12 on its uniform words, and no faster
    but recall@10 0.965 against 0.983 with ``--turn-texts`` (real utterances)."""
    return max(LEXICAL_CANDIDATES, LEXICAL_PER_RESULT * limit)


def index_args(limit: int) -> tuple[int, int]:
    """The trailing parameters of an index-path statement: the vector candidates
    (``ef_search`` too) and the lexical ones."""
    return candidates(limit), lexical_candidates(limit)


@dataclass(frozen=True)
class Capabilities:
    """What the server offers the index path."""

    iterative_scan: bool

    @property
    def index_path(self) -> bool:
        return self.iterative_scan

    def why_exact(self) -> str:
        """Why every scope takes the exact path on this server (for the log)."""
        return (
            "recall scans every scope exactly (complete, linear in its rows): pgvector is "
            "older than 0.8 (no iterative index scans)"
        )

    @classmethod
    async def probe(cls, conn: Any) -> Capabilities:
        found = await conn.fetchval(_VECTOR_VERSION)
        version = tuple(int(p) for p in str(found or "0").split(".") if p.isdigit())
        return cls(version >= (0, 8))


_VECTOR_VERSION = "SELECT extversion FROM pg_extension WHERE extname = 'vector'"


#: What the index path's two ways to the nearest rows cost (:func:`choose`), in rows
#: of the scope's scan (``sql.nearest``: each row read through the scope's B-tree range
#: and its cosine computed, 0.6-0.8 us a row): an HNSW iterative scan that reads ``t``
#: tuples (``ef_search / share``, the other scopes' rows it filters out included)
#: costs ``HNSW_COST * t ** HNSW_POWER``. Fitted on ``bench/recall.py --full``
#: (``--nearest`` prints both sides per namespace; 2 cores, warm buffers): the graph
#: 4.7 ms for a 200,000-turn namespace of a 220,000-row table (44 tuples), 15 ms for
#: 100,000 rows of a million (400), 23.5 at 50,171 rows, 30.9 at 33,514, 45 at 20,159
#: (1,984 tuples), 52 at 14,423; the scan 8 ms at 10,114 rows, 16.8 at 20,159, 25.7 at
#: 33,514, 39 at 50,171, 82 at 100,000, 118 at 200,000 turns. So the graph wins from
#: ~5,500 rows of a scope that is its whole table, ~21,000 of a 200,000-row table and
#: ~36,000 of a million.
HNSW_COST = 650
HNSW_POWER = 0.58


def choose(rows: int, table_rows: float, limit: int, *, own: bool = False) -> str:
    """:data:`EXACT`, :data:`INDEX`, :data:`OWN` or :data:`SCAN` for a scope of ``rows``
    rows in a table of about ``table_rows`` (planner estimate; 0 or less when unknown),
    on a server that can run the index path. Under :data:`INDEX_MIN_ROWS` the exact
    path; above it the index path (bm25 from the postings), its nearest rows from the
    HNSW graph where the iterative scan is expected to fit ``max_scan_tuples`` and to
    cost less than reading the scope's vectors (:data:`HNSW_COST`), else from the
    scope's own rows (:data:`SCAN`: exact, and linear in the scope at a fifth of the
    exact path's cost a row). The graph is the scope's own (:data:`OWN`, a partial
    index over its namespace, :mod:`~tulip_memory.store.postgres.graphs`) where
    ``own`` says it has one, which makes the scope its graph's whole table; else the
    table's (:data:`INDEX`)."""
    if rows < max(INDEX_MIN_ROWS, 2 * limit):
        return EXACT
    share = 1.0 if own or table_rows <= rows else rows / table_rows
    tuples = ef_search(limit) / share
    if share * MAX_SCAN_TUPLES < 2 * ef_search(limit):
        return SCAN
    if HNSW_COST * tuples**HNSW_POWER >= rows:
        return SCAN
    return OWN if own else INDEX


#: The fewest rows of a scope :func:`choose` sends to the HNSW graph (one that is its
#: whole table, at the least ``ef_search``): a reindex keeps the old slot's index over
#: a table while one of the job's namespaces has as many (``tulip_memory.reindex``).
GRAPH_MIN_ROWS = max(INDEX_MIN_ROWS, math.ceil(HNSW_COST * ef_search(1) ** HNSW_POWER))


def ways(chosen: str) -> tuple[str, ...]:
    """The index-path statements to try for a ``chosen`` plan, in order, before the
    exact path: an HNSW scan (of the table's graph or the scope's own) that comes back
    short (the scope's rows rarer in the graph than expected, or past
    ``max_scan_tuples``; its own graph dropped under it) is followed by the scope's
    scan, which has every row of the scope to order."""
    return (chosen, SCAN) if chosen in (INDEX, OWN) else (chosen,)


class TableRows:
    """A table's planner estimate of its rows (``pg_class.reltuples``, readable by any
    role), refreshed every :data:`TABLE_ROWS_TTL` seconds."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[float, float]] = {}

    async def get(self, conn: Any, table: str) -> float:
        now = time.monotonic()
        hit = self._seen.get(table)
        if hit is not None and now - hit[1] < TABLE_ROWS_TTL:
            return hit[0]
        value = float(await conn.fetchval(_RELTUPLES, table) or 0.0)
        self._seen[table] = (value, now)
        return value


_RELTUPLES = "SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)"

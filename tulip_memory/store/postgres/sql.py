"""Every SQL statement of ``PgMemory`` in one place.

Statements are templates over ``{t}`` (the schema-qualified table, a validated
identifier) and ``{p}`` (its bare name, for index and policy names). Values always
travel as bind parameters. A hybrid search takes one of two paths (the store
chooses, see :mod:`~tulip_memory.store.postgres.plan`): the exact path below, whose
vector ranking is written as ``(embedding <=> q) + 0`` on purpose (pgvector only uses
the HNSW index for a bare ``embedding <=> q`` order, and a post-filtered HNSW scan
can return too few rows of a namespace), or the index path further down, which asks
the postings and the HNSW index (iterative scan) or the scope's own vectors
(``nearest``) for candidates and ranks them with the exact path's scores. The scan of
a namespace's rows, found through the ``(tenant, ns, ...)`` B-tree, is what
guarantees complete recall: the index path falls back to it whenever its candidates
come up short.

Hybrid search (``search``, ``search_many``, ``search_across``, ``search_turns``) ranks
the rows of its scope (one namespace; several of one tenant for ``search_across``) in
ONE statement, from two scores computed over that same exact scan of the scope:

- lexical: bm25 of the rows whose ``tsv`` (a generated ``tsvector`` of ``content`` /
  ``text`` under the table's text search configuration) holds a lexeme of the query::

      bm25(d) = sum over query lexemes t in d of
                idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
      idf(t)  = ln(1 + (N - df + 0.5) / (df + 0.5))

  with ``tf`` the positions of ``t`` in ``d``, ``dl`` the distinct lexemes of ``d``, and
  ``N``, ``avgdl``, ``df`` taken over the scope's rows: another namespace's (or
  tenant's) text never moves a score.
- vector: the exact cosine distance ``dist`` to the query vector.

They are fused by a convex combination of normalised scores (``HybridRanking``)::

      fused = lexical_weight * bm25 / max(bm25 over the scope)
            + vector_weight  * (1 - dist / 2)          -- i.e. (1 + cosine) / 2

a side the row (or the query) lacks counting 0. Rows are ordered by ``fused``, then
cosine distance (rows without a vector last), then recency, so rows matching neither
side come after, in vector-then-recency order, and the scope comes back complete:
``min(limit, rows)``. Default weights: 0.2 lexical / 0.8 vector for semantic encoders,
0.9 / 0.1 for the offline word-hashing ones (``fusion.WORD_HASHING``); bm25 k1 = 1.2,
b = 0.4. All tuned on LoCoMo (``bench/recall_quality.py``).

User text reaches Postgres only as a bind parameter and only through ``to_tsvector``:
the lexemes it yields are quoted into the tsquery that matches rows, so no user text is
ever parsed as tsquery syntax. The exact path tests ``@@`` on the rows the B-tree scan
yields anyway; the index path finds the matching rows' postings by lexeme (see
:mod:`~tulip_memory.store.postgres.plan`).
"""

from __future__ import annotations

from tulip_memory.store.postgres import plan as _plan
from tulip_memory.store.postgres.render import render
from tulip_memory.store.validation import MAX_QUERY_TERMS as _MAX_QUERY_TERMS

COLS = "key, value, metadata, created_at, updated_at, version"

PIN_TENANT = "SELECT set_config('tulip.tenant', $1, true)"

# A write transaction's first statement: the tenant, and the layout lock held shared
# (see ``slots``), so a layout change waits for writes in flight and later writes
# read the layout it left. Then the layout's version, read after the lock is held (the
# materialized CTE yields its row first): a sequence is read as it stands, not as of
# the statement's snapshot, so a version bumped by a change that committed while this
# statement waited for the lock is seen, and the writer reads the layout again (a
# sequence's first nextval leaves last_value as it was, hence is_called).
PIN_SHARED = """
WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock_shared(hashtext('{t}/layout')))
SELECT set_config('tulip.tenant', $1, true),
       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END
        FROM {t}_layout_version) AS layout_version
FROM l"""

LAYOUT_LOCK = "SELECT pg_advisory_xact_lock(hashtext('{t}/layout'))"

# Every layout change, under LAYOUT_LOCK: writers with an older version re-read it.
BUMP_LAYOUT = "SELECT nextval('{t}_layout_version')"

# The tenant's slots (its own layout row, else the all-tenants one); in a write, read
# after PIN_SHARED in a statement of its own (a statement sees what committed before
# it started).
LAYOUT = """
SELECT read_slot, write_slots FROM {t}_layout
WHERE scope = $1 OR scope = '' ORDER BY scope = '' LIMIT 1"""

# A read transaction's first statement: the tenant, and the slots its recall reads.
# The layout rows are the tenant's under row-level security, so they are read after
# the pin: by a lateral subquery over the pinned value, run once the pin's row exists.
_PINNED = """
WITH pin AS MATERIALIZED (SELECT set_config('tulip.tenant', $1, true) AS pinned)"""
_PINNED_LAYOUT = """LEFT JOIN LATERAL (
    SELECT read_slot, write_slots FROM {t}_layout
    WHERE scope = pin.pinned OR scope = '' ORDER BY scope = '' LIMIT 1
) AS l ON true"""
PIN_LAYOUT = f"""{_PINNED}
SELECT pin.pinned, l.read_slot, l.write_slots
FROM pin {_PINNED_LAYOUT}"""

SLOTS = "SELECT slot, model, dim, spec, api_base FROM {t}_slots ORDER BY created_at, slot"

# Whether recall of the tenants without a layout of their own reads the original slot,
# and only the store's own embedder can fill it (no model string was recorded for it).
READS_ORIGINAL = """
SELECT l.read_slot = 'embedding' AND s.spec IS NULL
FROM {t}_layout l JOIN {t}_slots s ON s.slot = 'embedding' WHERE l.scope = ''"""

SEED_SLOT = """
INSERT INTO {t}_slots (slot, model, dim, spec, api_base) VALUES ('embedding', $1, $2, $3, $4)
ON CONFLICT DO NOTHING"""

ROLE_FLAGS = "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"

HAS_VECTOR = "SELECT 1 FROM pg_extension WHERE extname = 'vector'"

CREATE_VECTOR = "CREATE EXTENSION IF NOT EXISTS vector"

MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(hashtext($1))"

CREATE_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS {t}_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""

RELATION_EXISTS = "SELECT to_regclass($1) IS NOT NULL"

APPLIED_VERSIONS = "SELECT version FROM {t}_migrations ORDER BY version"

RECORD_VERSION = "INSERT INTO {t}_migrations (version, name) VALUES ($1, $2)"

VECTOR_WIDTH = """
SELECT a.atttypmod FROM pg_attribute a
WHERE a.attrelid = $1::regclass AND a.attname = 'embedding' AND NOT a.attisdropped"""

# Raises undefined_object when the configuration does not exist.
TEXT_SEARCH_CONFIG = "SELECT $1::regconfig::oid"

# The configuration a table's full-text column was generated with: Postgres records
# the regconfig constant of the column's expression as a dependency.
TABLE_TEXT_SEARCH_CONFIG = """
SELECT d.refobjid::regconfig::text AS config, d.refobjid = $2::regconfig::oid AS same
FROM pg_attribute a
JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
JOIN pg_depend d ON d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid
                AND d.refclassid = 'pg_ts_config'::regclass
WHERE a.attrelid = $1::regclass AND a.attname = 'tsv' AND NOT a.attisdropped"""

# Keep the newest $3 rows of a namespace.
PRUNE = """
DELETE FROM {t} WHERE tenant = $1 AND ns = $2 AND key IN (
    SELECT key FROM {t} WHERE tenant = $1 AND ns = $2
    ORDER BY updated_at DESC, key OFFSET $3)"""

GET = f"SELECT {COLS} FROM {{t}} WHERE tenant = $1 AND ns = $2 AND key = $3"

GET_MANY = """
SELECT u.ns, m.key, m.value, m.metadata, m.created_at, m.updated_at, m.version
FROM unnest($2::text[], $3::text[]) AS u(ns, key)
JOIN {t} m ON m.tenant = $1 AND m.ns = u.ns AND m.key = u.key"""

GET_EMBEDDING = "SELECT {v} AS embedding FROM {t} WHERE tenant = $1 AND ns = $2 AND key = $3"

DELETE = "DELETE FROM {t} WHERE tenant = $1 AND ns = $2 AND key = $3 RETURNING 1"

CLEAR = "DELETE FROM {t} WHERE tenant = $1 AND ns = $2"

LIST_KEYS = "SELECT key FROM {t} WHERE tenant = $1 AND ns = $2 ORDER BY key LIMIT $3"

LIST_NAMESPACES = """
SELECT DISTINCT ns FROM {t}
WHERE tenant = $1 AND (ns = $2 OR starts_with(ns, $2 || chr(31)))
ORDER BY ns LIMIT $3"""

# search_many: one LATERAL per namespace, each ranked exactly as `search` ranks it.
SEARCH_RECENT = f"""
SELECT n.idx, m.* FROM unnest($2::text[]) WITH ORDINALITY AS n(ns, idx)
CROSS JOIN LATERAL (
    SELECT {COLS}, row_number() OVER (ORDER BY updated_at DESC, key) AS _pos
    FROM {{t}} WHERE tenant = $1 AND ns = n.ns ORDER BY updated_at DESC, key LIMIT $3
) m
ORDER BY n.idx, m._pos"""

SEARCH_ACROSS_RECENT = f"""
SELECT ns, {COLS}, NULL::float8 AS distance FROM {{t}}
WHERE tenant = $1 AND ns = ANY($2::text[])
ORDER BY updated_at DESC, key
LIMIT $3"""

# -- hybrid search (see the module docstring) ---------------------------------------
# Parameters of every hybrid statement: $1 tenant, $2 namespace(s), $3 limit, $4 query
# vector (NULL: no vector score), $5 query text, $6 text search configuration, $7
# lexical weight, $8 vector weight, $9 bm25 k1, $10 bm25 b, and $11 the statement's
# own filter argument.

# The query's lexemes (its first ``MAX_QUERY_TERMS`` distinct ones, in the order they
# first occur), and a tsquery matching any of them: each lexeme is quoted the way
# tsquery input expects (quote and backslash doubled), never parsed as syntax.
_PROBE = f"""
probe AS (
    SELECT coalesce(array_agg(lexeme), ARRAY[]::text[]) AS terms,
           string_agg(chr(39) || replace(replace(lexeme, chr(92), repeat(chr(92), 2)),
                                         chr(39), repeat(chr(39), 2)) || chr(39),
                      ' | ')::tsquery AS query,
           $7::float8 AS w_lex, $8::float8 AS w_vec, $9::float8 AS k1, $10::float8 AS b
    FROM (
        SELECT lexeme FROM unnest(to_tsvector($6::regconfig, $5::text))
        ORDER BY positions[1], lexeme LIMIT {_MAX_QUERY_TERMS}
    ) q
)"""


def _hybrid(
    *, table: str, scope: str, cols: str, recency: str, out: str, keep: str = "true"
) -> str:
    """The rows of ``scope`` in ``table``, hybrid-ranked: ``out`` and ``_pos``, at most
    ``$3`` of them. ``keep`` may drop ranked rows; it never changes the statistics.

    One pass over the scope's rows: ``hits`` keeps the query's lexemes of a matching
    row (with their positions), ``terms`` has one row per such lexeme, and ``df`` and
    every row's bm25 are two aggregates over ``terms`` (set-based: a subquery per row
    costs twice as much on a big scope)."""
    return f"""
WITH scope AS MATERIALIZED (
    SELECT r.ctid AS _rid, {cols}, ({{v}} <=> $4) + 0 AS dist, length(tsv) AS dl,
           CASE WHEN tsv @@ p.query
                THEN ts_filter(setweight(tsv, 'A', p.terms), ARRAY['A']::"char"[]) END AS hits
    FROM {table} AS r CROSS JOIN probe p WHERE {scope}
),
stats AS MATERIALIZED (SELECT count(*)::float8 AS docs, avg(dl)::float8 AS avgdl FROM scope),
terms AS MATERIALIZED (
    SELECT s._rid, s.dl, u.lexeme, cardinality(u.positions) AS tf
    FROM scope s CROSS JOIN LATERAL unnest(s.hits) AS u WHERE s.hits IS NOT NULL
),
df AS MATERIALIZED (SELECT lexeme, count(*)::float8 AS df FROM terms GROUP BY lexeme),
bm AS MATERIALIZED (
    SELECT t._rid, sum(ln(1 + (st.docs - df.df + 0.5) / (df.df + 0.5))
                       * t.tf * (p.k1 + 1)
                       / (t.tf + p.k1 * (1 - p.b + p.b * t.dl / st.avgdl))) AS bm25
    FROM terms t JOIN df USING (lexeme) CROSS JOIN stats st CROSS JOIN probe p
    GROUP BY t._rid
),
scored AS MATERIALIZED (
    SELECT s.*, b.bm25 FROM scope s LEFT JOIN bm b USING (_rid)
),
fused AS (
    SELECT s.*, p.w_lex * coalesce(s.bm25 / max(s.bm25) OVER (), 0)
              + p.w_vec * coalesce(1 - s.dist / 2, 0) AS fused
    FROM scored s CROSS JOIN probe p
)
SELECT {out}, row_number() OVER (ORDER BY fused DESC, dist NULLS LAST, {recency}) AS _pos
FROM fused WHERE {keep}
ORDER BY _pos
LIMIT $3"""


_MEMORY_COLS = f"ns, {COLS}, content"

# One namespace per LATERAL. $11: keep only rows that match the query lexically or
# as a substring (the substring-only mode, whose rows carry no vectors).
_SEARCH_ONE = _hybrid(
    table="{t}",
    scope="tenant = $1 AND ns = n.ns",
    cols=_MEMORY_COLS,
    recency="updated_at DESC, key",
    out=COLS,
    keep="($11::bool IS NOT TRUE OR bm25 IS NOT NULL"
    " OR strpos(lower(content), lower($5::text)) > 0)",
)
SEARCH_HYBRID = f"""
WITH {_PROBE}
SELECT n.idx, m.* FROM unnest($2::text[]) WITH ORDINALITY AS n(ns, idx)
CROSS JOIN LATERAL ({_SEARCH_ONE}) m
ORDER BY n.idx, m._pos"""

# One ranking over the rows of several namespaces of a tenant (a recall across types).
_SEARCH_ACROSS = _hybrid(
    table="{t}",
    scope="tenant = $1 AND ns = ANY ($2::text[])",
    cols=_MEMORY_COLS,
    recency="updated_at DESC, ns, key",
    out=f"ns, {COLS}, dist AS distance",
)
SEARCH_ACROSS_HYBRID = f"""
WITH {_PROBE}
SELECT h.* FROM ({_SEARCH_ACROSS}) h ORDER BY h._pos"""

# The namespace's turns of a time window, hybrid-ranked; $11 is a cosine similarity
# threshold, $12 and $13 the window [since, until) on the turn's time (NULL: open),
# a range of the ``(tenant, ns, created_at)`` index.
_TURNS_SCOPE = (
    "tenant = $1 AND ns = $2::text"
    " AND created_at >= coalesce($12::timestamptz, '-infinity')"
    " AND created_at < coalesce($13::timestamptz, 'infinity')"
)
_SEARCH_TURNS = _hybrid(
    table="{t}_turns",
    scope=_TURNS_SCOPE,
    cols="event_id, position, text, turn, metadata, created_at",
    recency="created_at DESC, event_id, position",
    out="text, turn, metadata, position, 1 - dist AS score",
    keep="($11::float8 IS NULL OR 1 - dist >= $11::float8)",
)
SEARCH_TURNS = f"""
WITH {_PROBE}
SELECT h.* FROM ({_SEARCH_TURNS}) h ORDER BY h._pos"""

# -- the index path (see ``plan``) ------------------------------------------------------
# The exact path's ranking over candidates instead of every row of the scope: the best
# lexical matches by bm25 and the nearest rows, ``{n}`` (:func:`nearest`): by the HNSW
# index (an iterative scan, so the scope's filter does not leave it short while the
# index yields the scope's rows within ``hnsw.max_scan_tuples``; ``{h}`` is the index's
# halfvec expression of the slot, ``slots.ann_expr``, and every candidate's cosine is
# then computed again over the full-precision column), or by the scope's scan. bm25
# is the exact path's, computed over every matching row of the scope from the postings
# ``<table>_post`` (an index-only scan): ``docs`` and ``avgdl`` from the scope's
# counters (``<table>_ns_stats``), ``df`` and the normalising maximum over the
# matches. Only the candidates' wide rows are read, for their exact cosine and their
# columns, and ranked by the exact path's fused score. The top k differs from the
# exact path's only where the HNSW graph misses a near row (never with the scope's
# scan), or where a lexical match outside the best ones by bm25 and outside the
# nearest ranks in the top k by its cosine (see ``plan.lexical_candidates``).
# ``_cands`` is the number of candidates, on every row (on one row of NULLs when none
# is kept): fewer than ``min(limit, rows)`` and the store tries the next way
# (``plan.ways``), then the exact path.

# Where the index path's nearest rows come from (``{n}`` of its ``vec``, :func:`nearest`):
# the HNSW index, in the order of its own expression (``{h}``, an iterative scan), or
# the scope's rows themselves, read by its B-tree range and each cosine computed in
# full precision, a top-N sort keeping the nearest (written ``+ 0`` so that no index
# can order them): exact and complete, and cheaper than the graph for a scope that is a
# small share of its table (see ``plan.choose``).
_HNSW_ORDER = "{h} <=> $4::halfvec"
_NEAREST = {_plan.INDEX: _HNSW_ORDER, _plan.OWN: _HNSW_ORDER, _plan.SCAN: "({v} <=> $4) + 0"}

# A namespace's own graph (``graphs``): a partial HNSW index over the rows whose
# ``GRAPH_KEY`` is the namespace's, so it holds no other namespace's rows (but for a
# 64-bit hash collision, which the scope's own condition filters out) and no tenant's
# or namespace's name is written into the catalog, which every role reads. With the
# parameters' values in the plan (``force_custom_plan``), ``OWN_GRAPH``'s right side
# is a constant, so the planner proves the index's predicate from it and may read it.
# The key's one form, over columns (the index's predicate) or parameters (a statement's
# side, folded to a constant): the planner matches the two by their expressions.


def _graph_key(tenant: str, ns: str) -> str:
    return f"hashtextextended({tenant} || '/' || {ns}, 0)"


GRAPH_KEY = _graph_key("tenant", "ns")
GRAPH_KEY_OF = f"SELECT {_graph_key('$1', '$2')}"
_OWN_GRAPH = f"\n      AND {GRAPH_KEY} = {_graph_key('$1', '$2::text')}"


def nearest(statement: str, chosen: str) -> str:
    """An index-path ``statement`` (one namespace's, ``$1`` its tenant and ``$2`` its
    name, for :data:`~tulip_memory.store.postgres.plan.OWN`) whose nearest rows come the
    way ``chosen`` says."""
    return render(statement, n=_NEAREST[chosen], g=_OWN_GRAPH if chosen == _plan.OWN else "")


def _plan_settings(ef: int, tuples: int) -> str:
    """Per transaction: iterative HNSW scans of ``$ef`` and ``$tuples``, and plans made
    for the parameters at hand (a generic plan would not know the namespace is big, and
    sorted a scope's rows another way: ``plan``)."""
    return f"""set_config('hnsw.iterative_scan', 'relaxed_order', true),
       set_config('hnsw.ef_search', ${ef}::text, true),
       set_config('hnsw.max_scan_tuples', ${tuples}::text, true),
       set_config('plan_cache_mode', 'force_custom_plan', true)"""


PLAN_SETTINGS = f"SELECT {_plan_settings(1, 2)}"


def _pin_counted(stats: str, kind: str) -> str:
    """A hybrid search's first statement where the index path may be taken:
    ``PIN_LAYOUT``'s row, the rows the counters ``stats`` hold for namespaces ``$2``
    (``names`` and ``rows``, NULL when none was ever counted), read after the pin as the
    layout is, those of them with a graph of their own over the slot recall reads
    (``graphs``: ``<table>_graphs`` rows of ``kind``, ready), and the index path's
    settings (``$3`` ``ef_search``, ``$4`` ``max_scan_tuples``) for the transaction: one
    round trip where there were three. The exact path takes no HNSW scan, and a plan
    made per call costs it nothing measurable (0.76-1.34 ms with one against 0.85-1.29
    left to Postgres)."""
    return f"""{_PINNED}
SELECT pin.pinned, l.read_slot, l.write_slots, c.names, c.rows, g.graphs,
       {_plan_settings(3, 4)}
FROM pin {_PINNED_LAYOUT}
CROSS JOIN LATERAL (
    SELECT array_agg(ns) AS names, array_agg(rows) AS rows FROM {stats}
    WHERE tenant = pin.pinned AND ns = ANY ($2::text[])
) AS c
CROSS JOIN LATERAL (
    SELECT array_agg(ns) AS graphs FROM {{t}}_graphs
    WHERE kind = '{kind}' AND tenant = pin.pinned AND ns = ANY ($2::text[])
      AND slot = coalesce(l.read_slot, 'embedding') AND ready
) AS g"""


PIN_COUNTED = _pin_counted("{t}_ns_stats", "memories")
PIN_TURNS_COUNTED = _pin_counted("{t}_turns_ns_stats", "turns")


def _fused(s: str) -> str:
    """The fused score of a row ``s`` (with ``bm25`` and ``dist``), normalised by the
    best bm25 of the scope's lexical matches."""
    return (
        f"p.w_lex * coalesce({s}.bm25 / (SELECT top FROM best), 0)"
        f" + p.w_vec * coalesce(1 - {s}.dist / 2, 0)"
    )


# What a posting ``t`` adds to its row's bm25 under the query lexemes' factors ``w``,
# and a row's bm25 over its postings, written once for every place that computes them:
# the statement merges their values per row.
_BM25_TERM = "w.idf * t.tf / (t.tf + w.c + w.k * t.dl)"
_BM25_SUM = f"sum({_BM25_TERM}) AS bm25"


def _reach(bm25: str) -> str:
    """The most a row of bm25 ``bm25`` outside the nearest rows can score, fused, and
    whether that reaches the k-th score kept (``bound``); monotone in ``bm25``."""
    return (
        f"p.w_lex * {bm25} / (SELECT top FROM best) + p.w_vec * (1 - bound.dmax / 2) >= bound.kth"
    )


def _indexed(
    *,
    table: str,
    scope: str,
    stats_scope: str,
    keys: str,
    cols: str,
    recency: str,
    out: str,
    cand: int,
    keep: str = "true",
    counted: str = "true",
) -> str:
    """The index path of ``_hybrid``'s ranking of ``scope``: ``keys`` name a row within
    the tenant, ``${cand}`` is how many nearest rows the HNSW index proposes and
    ``${cand + 1}`` how many of the best lexical matches are read. bm25 is the exact
    path's, from the postings ``<table>_post`` (``scope`` must name only its columns),
    each query lexeme's ``df`` read from the counters ``<table>_df`` of
    ``stats_scope`` when ``counted`` holds (then ``scope`` is all of ``stats_scope``),
    counted from its postings otherwise. Only the candidates' wide rows are read, for
    their cosine and columns.

    The lexical side makes MaxScore's cut (Turtle and Flood, 1995) when it is cheap. A
    lexeme adds at most ``ub`` to any row's bm25: its idf (times ``k1 + 1``) times
    ``tf / (tf + c + k * dl)`` at the counters' bounds of its postings (the most
    positions, the fewest lexemes), so the common lexemes ("great", "thank": each in
    13-19% of a namespace of conversation turns) can add little. The rarest lexemes
    whose postings add up to at most
    :data:`~tulip_memory.store.postgres.plan.ESSENTIAL_POSTINGS` are essential: their
    postings are streamed into a partial sum by row (``part``). The others complete
    only the partial matches that could still be among the best ``${cand + 1}``
    (partial plus the others' bound at least the ``${cand + 1}``-th best partial,
    ``todo``): looked up by key when those are few (``looked``), else streamed and
    kept where they meet one of them, a hashed semi-join with nothing summed for the
    rest (``joined``); ``go`` picks the cheaper by
    :data:`~tulip_memory.store.postgres.plan.LOOKUP_COST` and
    :data:`~tulip_memory.store.postgres.plan.JOIN_COST`.
    A row matching only the others scores less than their bound (``split.rest``):
    when the best completed match reaches it, that match is the scope's best (the
    normalising maximum, ``best``), and a row outside the completed ones scores less
    than the bound or the worst of the best. Otherwise every posting of the query is
    streamed into the sum by row (``bm``), as without the cut.

    Past the sum, the nearest rows' bm25 comes from their postings (a lookup by key per
    query lexeme), and the other matches are read in full (``bm``) only when the most
    a row outside the candidates can score (``outside``) could still reach the top
    ``$3`` (``gate``; the bound is monotone in bm25). Each read of ``bm`` sits behind a
    one-time filter, so it is not computed at all when nothing needs it.

    Each postings read is a lateral subquery kept whole (``OFFSET 0``), so its lexeme
    (and keys) are conditions of its own index scan whatever the statistics say:
    flattened into a join, a table not yet analysed was planned as a scan of the
    scope's every posting filtered by lexeme (a 30,000-turn namespace right after its
    load: 624 ms a query, 10 with the reads kept whole; the statement before the
    lateral reads, with ``lexeme = ANY``: 106)."""
    same = " AND ".join(f"c.{k} = b.{k}" for k in keys.split(", "))
    v_keys = ", ".join(f"v.{k}" for k in keys.split(", "))
    x_keys = ", ".join(f"x.{k}" for k in keys.split(", "))
    t_keys = ", ".join(f"t.{k}" for k in keys.split(", "))
    on_keys = " AND ".join(f"{k} = v.{k}" for k in keys.split(", "))
    on_x = " AND ".join(f"{k} = x.{k}" for k in keys.split(", "))
    postings = f"""w CROSS JOIN LATERAL (
        SELECT {keys}, tf, dl FROM {table}_post WHERE {scope} AND lexeme = w.lexeme OFFSET 0
    ) t"""
    return f"""
WITH st AS MATERIALIZED (
    SELECT coalesce(sum(rows), 0)::float8 AS docs,
           coalesce(sum(dl), 0)::float8 / greatest(coalesce(sum(rows), 0), 1) AS avgdl
    FROM {table}_ns_stats WHERE {stats_scope}
),
df AS MATERIALIZED (
    SELECT q.lexeme, CASE WHEN {counted} THEN n.df
        ELSE (SELECT count(*) FROM {table}_post WHERE {scope} AND lexeme = q.lexeme)
        END::float8 AS df, n.tf_max, n.dl_min
    FROM (SELECT DISTINCT unnest(terms) AS lexeme FROM probe) q CROSS JOIN LATERAL (
        SELECT coalesce(sum(df), 0) AS df, max(tf_max) AS tf_max, min(dl_min) AS dl_min
        FROM {table}_df WHERE {stats_scope} AND lexeme = q.lexeme
    ) n
),
w AS MATERIALIZED (
    SELECT *, idf * coalesce(tf_max / (tf_max + c + k * dl_min), 1) AS ub,
           sum(df) OVER (ORDER BY df, lexeme) <= {_plan.ESSENTIAL_POSTINGS} AS ess
    FROM (
        SELECT lexeme, df.df, ln(1 + (st.docs - df.df + 0.5) / (df.df + 0.5)) * (p.k1 + 1) AS idf,
               p.k1 * (1 - p.b) AS c, p.k1 * p.b / st.avgdl AS k, df.tf_max, df.dl_min
        FROM df CROSS JOIN st CROSS JOIN probe p WHERE df.df > 0
    ) x
),
split AS MATERIALIZED (
    SELECT coalesce(bool_or(ess), false) AS cut,
           coalesce(sum(ub) FILTER (WHERE NOT ess), 0) AS rest,
           count(*) FILTER (WHERE NOT ess) AS others,
           coalesce(sum(df) FILTER (WHERE NOT ess), 0) AS streamed
    FROM w
),
part AS MATERIALIZED (
    SELECT {keys}, {_BM25_SUM} FROM {postings} WHERE w.ess GROUP BY {keys}
),
low AS MATERIALIZED (
    SELECT coalesce((SELECT bm25 FROM part ORDER BY bm25 DESC OFFSET ${cand + 1} - 1 LIMIT 1), 0)
           AS theta
),
todo AS MATERIALIZED (
    SELECT x.* FROM part x CROSS JOIN split CROSS JOIN low WHERE x.bm25 + split.rest >= low.theta
),
go AS MATERIALIZED (
    SELECT cut AND looking <= joining AS by_key, cut AND looking > joining AS by_join FROM (
        SELECT cut, (SELECT count(*) FROM todo) * others * {_plan.LOOKUP_COST} AS looking,
               streamed * {_plan.JOIN_COST} AS joining
        FROM split
    ) c
),
looked AS MATERIALIZED (
    SELECT {x_keys}, x.bm25 + coalesce(r.bm25, 0) AS bm25
    FROM todo x CROSS JOIN LATERAL (
        SELECT {_BM25_SUM} FROM w CROSS JOIN LATERAL (
            SELECT tf, dl FROM {table}_post WHERE tenant = $1 AND lexeme = w.lexeme AND {on_x}
            OFFSET 0
        ) t WHERE NOT w.ess
    ) r
    WHERE (SELECT by_key FROM go)
),
joined AS MATERIALIZED (
    SELECT {keys}, sum(bm25) AS bm25 FROM (
        SELECT {keys}, bm25 FROM todo
        UNION ALL
        SELECT {t_keys}, {_BM25_TERM} FROM {postings}
        WHERE NOT w.ess AND (({t_keys}) IN (SELECT {keys} FROM todo)) IS TRUE
    ) j
    WHERE (SELECT by_join FROM go)
    GROUP BY {keys}
),
done AS MATERIALIZED (SELECT * FROM looked UNION ALL SELECT * FROM joined),
cut AS MATERIALIZED (
    SELECT (go.by_key OR go.by_join) AND coalesce((SELECT max(bm25) FROM done), 0) >= split.rest
           AS ok
    FROM go CROSS JOIN split
),
bm AS MATERIALIZED (
    SELECT {keys}, {_BM25_SUM} FROM {postings} GROUP BY {keys}
),
lex_top AS MATERIALIZED (
    SELECT {keys}, bm25 FROM (
        SELECT {keys}, bm25 FROM done WHERE (SELECT ok FROM cut)
        UNION ALL SELECT {keys}, bm25 FROM bm WHERE NOT (SELECT ok FROM cut)
    ) l ORDER BY bm25 DESC, {keys} LIMIT ${cand + 1}
),
best AS MATERIALIZED (SELECT max(bm25) AS top FROM lex_top),
vec AS MATERIALIZED (
    SELECT {keys} FROM {table} WHERE {scope} AND $4::vector IS NOT NULL{{g}}
    ORDER BY {{n}} LIMIT ${cand}
),
vec_bm AS MATERIALIZED (
    SELECT {v_keys}, {_BM25_SUM}
    FROM vec v CROSS JOIN w CROSS JOIN LATERAL (
        SELECT tf, dl FROM {table}_post WHERE tenant = $1 AND lexeme = w.lexeme AND {on_keys}
        OFFSET 0
    ) t
    GROUP BY {v_keys}
),
cand AS MATERIALIZED (
    SELECT {keys}, max(bm25) AS bm25, bool_or(near) AS near FROM (
        SELECT {keys}, bm25, false AS near FROM lex_top
        UNION ALL SELECT {keys}, b.bm25, true FROM vec LEFT JOIN vec_bm b USING ({keys})
    ) c GROUP BY {keys}
),
scored AS MATERIALIZED (
    SELECT {cols}, ({{v}} <=> $4) + 0 AS dist, c.bm25, c.near
    FROM cand c JOIN {table} USING ({keys}) WHERE tenant = $1
),
bound AS MATERIALIZED (
    SELECT coalesce((
               SELECT {_fused("s")} FROM scored s CROSS JOIN probe p WHERE {keep}
               ORDER BY 1 DESC OFFSET $3 - 1 LIMIT 1), -1) AS kth,
           CASE WHEN $4::vector IS NULL THEN 2
                WHEN (SELECT count(*) FROM vec) < ${cand} THEN 0
                ELSE (SELECT max(dist) FROM scored WHERE near)
           END AS dmax
),
outside AS MATERIALIZED (
    SELECT greatest(
        CASE WHEN (SELECT count(*) FROM lex_top) >= ${cand + 1}
             THEN (SELECT min(bm25) FROM lex_top) ELSE 0 END,
        CASE WHEN cut.ok THEN split.rest ELSE 0 END) AS ub
    FROM cut CROSS JOIN split
),
gate AS MATERIALIZED (
    SELECT o.ub > 0 AND {_reach("o.ub")} AS open
    FROM outside o CROSS JOIN bound CROSS JOIN probe p
),
extra AS MATERIALIZED (
    SELECT {keys}, b.bm25 FROM bm b CROSS JOIN bound CROSS JOIN probe p
    WHERE (SELECT open FROM gate) AND {_reach("b.bm25")}
      AND NOT EXISTS (SELECT 1 FROM cand c WHERE {same})
),
more AS MATERIALIZED (
    SELECT {cols}, ({{v}} <=> $4) + 0 AS dist, e.bm25, false AS near
    FROM extra e JOIN {table} USING ({keys}) WHERE tenant = $1
),
ranked AS (
    SELECT {out},
           row_number() OVER (ORDER BY {_fused("s")} DESC, dist NULLS LAST, {recency}) AS _pos
    FROM (SELECT * FROM scored UNION ALL SELECT * FROM more) s CROSS JOIN probe p
    WHERE {keep}
    ORDER BY _pos LIMIT $3
)
SELECT n._cands, r.* FROM (
    SELECT (SELECT count(*) FROM cand) + (SELECT count(*) FROM extra) AS _cands
) n
LEFT JOIN ranked r ON true
ORDER BY r._pos"""


# One namespace ($2 text); $12 the vector candidates, $13 the lexical ones.
SEARCH_INDEXED = f"""
WITH {_PROBE}
SELECT h.* FROM ({
    _indexed(
        table="{t}",
        scope="tenant = $1 AND ns = $2::text",
        stats_scope="tenant = $1 AND ns = $2::text",
        keys="ns, key",
        cols=_MEMORY_COLS,
        recency="updated_at DESC, key",
        out=COLS,
        cand=12,
        keep="$11::bool IS NOT TRUE",
    )
}) h ORDER BY h._pos"""

# Several namespaces of a tenant ($2 text[]); $11 the vector candidates, $12 the lexical
# ones.
SEARCH_ACROSS_INDEXED = f"""
WITH {_PROBE}
SELECT h.* FROM ({
    _indexed(
        table="{t}",
        scope="tenant = $1 AND ns = ANY ($2::text[])",
        stats_scope="tenant = $1 AND ns = ANY ($2::text[])",
        keys="ns, key",
        cols=_MEMORY_COLS,
        recency="updated_at DESC, ns, key",
        out=f"ns, {COLS}, dist AS distance",
        cand=11,
    )
}) h ORDER BY h._pos"""

# A namespace's turns of a time window; $14 the vector candidates, $15 the lexical ones.
SEARCH_TURNS_INDEXED = f"""
WITH {_PROBE}
SELECT h.* FROM ({
    _indexed(
        table="{t}_turns",
        scope=_TURNS_SCOPE,
        stats_scope="tenant = $1 AND ns = $2::text",
        keys="ns, event_id, position",
        cols="event_id, position, text, turn, metadata, created_at",
        recency="created_at DESC, event_id, position",
        out="text, turn, metadata, position, 1 - dist AS score",
        cand=14,
        keep="($11::float8 IS NULL OR 1 - dist >= $11::float8)",
        counted="$12::timestamptz IS NULL AND $13::timestamptz IS NULL",
    )
}) h ORDER BY h._pos"""

# The latest turn a thread had before event sequence $4 (the one a reply arriving in
# a later session may complete), through the ``{p}_turns_thread`` index.
LAST_TURN = """
SELECT event_id, position, text, turn, metadata, source_seq,
       extract(epoch FROM created_at)::float8 AS at
FROM {t}_turns
WHERE tenant = $1 AND ns = $2 AND thread_id = $3 AND source_seq < $4
ORDER BY source_seq DESC, position DESC
LIMIT 1"""

SEARCH_BY_EMBEDDING = f"""
SELECT {COLS}, ({{v}} <=> $3) AS distance FROM {{t}}
WHERE tenant = $1 AND ns = $2 AND {{v}} IS NOT NULL
  AND ($5::jsonb IS NULL OR metadata @> $5::jsonb)
  AND ($6::float8 IS NULL OR 1 - ({{v}} <=> $3) >= $6::float8)
ORDER BY ({{v}} <=> $3) + 0, updated_at DESC, key
LIMIT $4"""

"""The memories family (:data:`MEMORIES`): a ``PgMemory`` table and its companions,
recorded in ``<table>_migrations`` (see :mod:`~tulip_memory.store.postgres.family`).

Each migration is a list of statement templates over ``{t}`` (qualified table),
``{p}`` (bare table name, for index and policy names), ``{dim}`` (vector width) and
``{tsconfig}`` (the text search configuration, a validated name rendered as a
``regconfig`` literal: a generated column's expression cannot take a parameter);
:func:`names` gives them for one table. They run as the owner role (provisioning, or
a store built with ``migrator=``).
"""

from __future__ import annotations

from tulip_memory.store.postgres.audit import Expected
from tulip_memory.store.postgres.family import Family, Migration, tenant_rls
from tulip_memory.store.postgres.sql import GRAPH_KEY


def _ns_stats(t: str, p: str) -> tuple[str, ...]:
    """``<t>_ns_stats``: each namespace's rows and the sum of their ``length(tsv)`` (the
    recall plan's row count, and the bm25 document count and mean length of the index
    path), kept exact by statement-level triggers over the rows each statement
    inserted, updated or deleted; tenant-scoped like ``t``.

    A namespace gets its counter at its first insert after this migration, counted
    then from the table itself (the trigger runs in the writer's transaction, pinned
    to the tenant, so it sees every row of the namespace): rows written before the
    migration are counted too, although the migration itself (which runs under
    row-level security) cannot see them. Until then the store reads no counter and
    takes the exact path. When two first inserts race, the second one adds its own
    rows to the counter the first created (its rows were not visible to that count).
    """
    return (
        f"""CREATE TABLE {t}_ns_stats (
            tenant text NOT NULL,
            ns text NOT NULL,
            rows bigint NOT NULL,
            dl bigint NOT NULL,
            PRIMARY KEY (tenant, ns)
        )""",
        *tenant_rls(f"{t}_ns_stats", f"{p}_ns_stats"),
        # One function for the three triggers: a branch reads only the transition
        # tables its event has.
        f"""CREATE FUNCTION {t}_ns_count() RETURNS trigger
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
            BEGIN
                IF TG_OP = 'INSERT' THEN
                    WITH d AS (SELECT tenant, ns, count(*) AS n, sum(length(tsv)) AS dl
                               FROM new_rows GROUP BY tenant, ns),
                    bumped AS (
                        UPDATE {t}_ns_stats s SET rows = s.rows + d.n, dl = s.dl + d.dl
                        FROM d WHERE s.tenant = d.tenant AND s.ns = d.ns
                        RETURNING s.tenant, s.ns)
                    INSERT INTO {t}_ns_stats AS s (tenant, ns, rows, dl)
                    SELECT d.tenant, d.ns, c.n, c.dl FROM d
                    CROSS JOIN LATERAL (
                        SELECT count(*) AS n, coalesce(sum(length(m.tsv)), 0) AS dl
                        FROM {t} m WHERE m.tenant = d.tenant AND m.ns = d.ns) c
                    WHERE NOT EXISTS (SELECT 1 FROM bumped b
                                      WHERE b.tenant = d.tenant AND b.ns = d.ns)
                    ON CONFLICT (tenant, ns) DO UPDATE
                    SET rows = s.rows + (SELECT count(*) FROM new_rows r
                                         WHERE r.tenant = s.tenant AND r.ns = s.ns),
                        dl = s.dl + (SELECT coalesce(sum(length(r.tsv)), 0) FROM new_rows r
                                     WHERE r.tenant = s.tenant AND r.ns = s.ns);
                ELSIF TG_OP = 'DELETE' THEN
                    UPDATE {t}_ns_stats s SET rows = s.rows - d.n, dl = s.dl - d.dl
                    FROM (SELECT tenant, ns, count(*) AS n, coalesce(sum(length(tsv)), 0) AS dl
                          FROM old_rows GROUP BY tenant, ns) d
                    WHERE s.tenant = d.tenant AND s.ns = d.ns;
                ELSE
                    UPDATE {t}_ns_stats s SET dl = s.dl + d.dl
                    FROM (SELECT tenant, ns, sum(dl) AS dl FROM (
                              SELECT tenant, ns, length(tsv) AS dl FROM new_rows
                              UNION ALL SELECT tenant, ns, -length(tsv) FROM old_rows) u
                          GROUP BY tenant, ns HAVING sum(dl) <> 0) d
                    WHERE s.tenant = d.tenant AND s.ns = d.ns;
                END IF;
                RETURN NULL;
            END $fn$""",
        f"""CREATE TRIGGER {p}_ns_insert AFTER INSERT ON {t}
            REFERENCING NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION {t}_ns_count()""",
        f"""CREATE TRIGGER {p}_ns_update AFTER UPDATE ON {t}
            REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION {t}_ns_count()""",
        f"""CREATE TRIGGER {p}_ns_delete AFTER DELETE ON {t}
            REFERENCING OLD TABLE AS old_rows
            FOR EACH STATEMENT EXECUTE FUNCTION {t}_ns_count()""",
        # Counts what this role sees now: every row for an administrator, none under
        # row-level security (those namespaces are counted at their next insert).
        f"""INSERT INTO {t}_ns_stats (tenant, ns, rows, dl)
            SELECT tenant, ns, count(*), coalesce(sum(length(tsv)), 0) FROM {t}
            GROUP BY tenant, ns""",
    )


def _ns_count_by_fresh_namespace(t: str) -> str:
    """Migration 13's counter trigger function: as migration 11's, but a namespace is
    counted from the table only when it has no counter yet (migration 11's statement
    let the planner count every namespace an insert touched, so an insert into a big
    namespace read all of its rows)."""
    return f"""CREATE OR REPLACE FUNCTION {t}_ns_count() RETURNS trigger
        LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
        BEGIN
            IF TG_OP = 'INSERT' THEN
                WITH d AS MATERIALIZED (
                    SELECT tenant, ns, count(*) AS n, sum(length(tsv)) AS dl
                    FROM new_rows GROUP BY tenant, ns),
                bumped AS (
                    UPDATE {t}_ns_stats s SET rows = s.rows + d.n, dl = s.dl + d.dl
                    FROM d WHERE s.tenant = d.tenant AND s.ns = d.ns
                    RETURNING s.tenant, s.ns),
                fresh AS MATERIALIZED (
                    SELECT d.tenant, d.ns FROM d
                    WHERE NOT EXISTS (SELECT 1 FROM bumped b
                                      WHERE b.tenant = d.tenant AND b.ns = d.ns))
                INSERT INTO {t}_ns_stats AS s (tenant, ns, rows, dl)
                SELECT f.tenant, f.ns, c.n, c.dl FROM fresh f
                CROSS JOIN LATERAL (
                    SELECT count(*) AS n, coalesce(sum(length(m.tsv)), 0) AS dl
                    FROM {t} m WHERE m.tenant = f.tenant AND m.ns = f.ns) c
                ON CONFLICT (tenant, ns) DO UPDATE
                SET rows = s.rows + (SELECT count(*) FROM new_rows r
                                     WHERE r.tenant = s.tenant AND r.ns = s.ns),
                    dl = s.dl + (SELECT coalesce(sum(length(r.tsv)), 0) FROM new_rows r
                                 WHERE r.tenant = s.tenant AND r.ns = s.ns);
            ELSIF TG_OP = 'DELETE' THEN
                UPDATE {t}_ns_stats s SET rows = s.rows - d.n, dl = s.dl - d.dl
                FROM (SELECT tenant, ns, count(*) AS n, coalesce(sum(length(tsv)), 0) AS dl
                      FROM old_rows GROUP BY tenant, ns) d
                WHERE s.tenant = d.tenant AND s.ns = d.ns;
            ELSE
                UPDATE {t}_ns_stats s SET dl = s.dl + d.dl
                FROM (SELECT tenant, ns, sum(dl) AS dl FROM (
                          SELECT tenant, ns, length(tsv) AS dl FROM new_rows
                          UNION ALL SELECT tenant, ns, -length(tsv) FROM old_rows) u
                      GROUP BY tenant, ns HAVING sum(dl) <> 0) d
                WHERE s.tenant = d.tenant AND s.ns = d.ns;
            END IF;
            RETURN NULL;
        END $fn$"""


def _sync_triggers(t: str, p: str, kind: str) -> tuple[str, ...]:
    """The statement-level triggers keeping ``<t>_<kind>`` in step with ``t``: one per
    event, each running ``<t>_<kind>_sync()`` over the transition tables it has."""
    return tuple(
        f"""CREATE TRIGGER {p}_{kind}_{op.lower()} AFTER {op} ON {t}
            REFERENCING {refs}
            FOR EACH STATEMENT EXECUTE FUNCTION {t}_{kind}_sync()"""
        for op, refs in (
            ("INSERT", "NEW TABLE AS new_rows"),
            ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
            ("DELETE", "OLD TABLE AS old_rows"),
        )
    )


def _lexicon(t: str, p: str, keys: str, extra: str = "") -> tuple[str, ...]:
    """``<t>_lex``: the narrow copy of ``t``'s full-text side (its keys, ``tsv`` and
    ``extra`` columns) that the recall plan's index path ranks by bm25, so a big
    scope's lexical matches are read from rows of ~100 bytes, not from ``t``'s rows
    of ~1.7 KB (vectors, text, metadata): only the best matches' wide rows are read
    after (see :mod:`~tulip_memory.store.postgres.plan`). Only rows with a lexeme
    are kept (no other row can match). Statement-level triggers keep it in the
    writer's transaction; an update that leaves ``tsv`` as it was (a reindex
    writing vectors) changes nothing. Tenant-scoped like ``t``; the backfill reads
    ``t`` as its owner, with row-level security unforced inside the migration's
    transaction only (no other session ever sees it unforced)."""
    cols = [k.strip() for k in f"{keys}, tsv{extra}".split(",")]
    key_list = [k.strip() for k in keys.split(",")]
    same = " AND ".join(f"x.{k} = y.{k}" for k in ["tenant", "ns", *key_list])
    listed = ", ".join(cols)
    picked = ", ".join(f"n.{c}" for c in cols)
    conflict = ", ".join(["tenant", "ns", *key_list])
    # An updated row whose indexed columns are unchanged (and not empty) keeps its copy.
    values = [c for c in cols if c not in key_list]
    kept = " AND ".join(
        [same.replace("x.", "n."), *(f"n.{c} = y.{c}" for c in values), "length(n.tsv) > 0"]
    )
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in values)
    return (
        f"""CREATE TABLE {t}_lex (
            tenant text NOT NULL,
            ns text NOT NULL,
            {_lex_columns(cols)},
            PRIMARY KEY ({conflict})
        )""",
        f"CREATE INDEX {p}_lex_tsv ON {t}_lex USING gin (tsv)",
        # One branch per event: each reads only the transition tables its event has.
        f"""CREATE FUNCTION {t}_lex_sync() RETURNS trigger
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
            BEGIN
                IF TG_OP = 'INSERT' THEN
                    INSERT INTO {t}_lex (tenant, ns, {listed})
                    SELECT n.tenant, n.ns, {picked} FROM new_rows n WHERE length(n.tsv) > 0;
                ELSIF TG_OP = 'DELETE' THEN
                    DELETE FROM {t}_lex x USING old_rows y WHERE {same};
                ELSE
                    DELETE FROM {t}_lex x USING old_rows y WHERE {same} AND NOT EXISTS (
                        SELECT 1 FROM new_rows n WHERE {kept});
                    INSERT INTO {t}_lex (tenant, ns, {listed})
                    SELECT n.tenant, n.ns, {picked} FROM new_rows n
                    WHERE length(n.tsv) > 0 AND NOT EXISTS (SELECT 1 FROM old_rows y WHERE {kept})
                    ON CONFLICT ({conflict}) DO UPDATE SET {sets};
                END IF;
                RETURN NULL;
            END $fn$""",
        *_sync_triggers(t, p, "lex"),
        f"ALTER TABLE {t} NO FORCE ROW LEVEL SECURITY",
        f"""INSERT INTO {t}_lex (tenant, ns, {listed})
            SELECT tenant, ns, {listed} FROM {t} WHERE length(tsv) > 0""",
        f"ALTER TABLE {t} FORCE ROW LEVEL SECURITY",
        *tenant_rls(f"{t}_lex", f"{p}_lex"),
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {t}_lex TO tulip_dml, tulip_ops",
    )


class _Postings:
    """The names one postings table's statements are built from: ``t``'s row key
    (``tenant, ns`` and ``keys``), its ``extra`` columns, and the postings' columns."""

    def __init__(self, t: str, keys: str, extra: str = "") -> None:
        self.t = t
        self.keys = [k.strip() for k in keys.split(",")]
        self.extras = [c.strip() for c in extra.split(",") if c.strip()]
        self.row_key = ["tenant", "ns", *self.keys]
        self.columns = ["tenant", "ns", "lexeme", *self.keys, "tf", "dl", *self.extras]
        self.pk = ["tenant", "ns", "lexeme", *self.keys]

    def insert(self, where: str) -> str:
        """Insert the postings of the rows of ``new_rows n`` that satisfy ``where``."""
        picked = ", ".join(
            [
                "n.tenant",
                "n.ns",
                "u.lexeme",
                *(f"n.{k}" for k in self.keys),
                "cardinality(u.positions)",
                "length(n.tsv)",
                *(f"n.{c}" for c in self.extras),
            ]
        )
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in ["tf", "dl", *self.extras])
        return f"""INSERT INTO {self.t}_post ({", ".join(self.columns)})
                    SELECT {picked} FROM new_rows n CROSS JOIN LATERAL unnest(n.tsv) AS u
                    WHERE {where}
                    ON CONFLICT ({", ".join(self.pk)}) DO UPDATE SET {sets}"""

    def found(self, rows: str, prefix: str = "") -> str:
        """The ``ctid`` of every posting of ``rows`` (a relation with the row key and
        ``tsv``; ``prefix`` may define it), as one array.

        Each of the rows' lexemes is looked up by the whole primary key, in a lateral
        subquery kept whole (``OFFSET 0``), whose conditions are plain equalities on
        the outer row and lexeme (leakproof, so row-level security lets them be index
        conditions). Written as a join, the plan was the planner's to choose, and with
        no statistics on the rows (a trigger's transition tables have none) it looked
        each row up by ``(tenant, ns, keys)`` alone and filtered the lexemes: a scan of
        the row's whole namespace of postings for every row (500 rows of a
        10,000-row namespace: 6 s where 40 ms do). ``x.lexeme = ANY
        (tsvector_to_array(y.tsv))`` is not leakproof (the function is not), so under
        forced row-level security it would only be a filter, with the same effect."""
        on = " AND ".join(f"x.{k} = y.{k}" for k in self.row_key)
        return f"""{prefix} SELECT ARRAY(
                        SELECT x.ctid FROM {rows} y
                        CROSS JOIN LATERAL unnest(tsvector_to_array(y.tsv)) AS l(lexeme)
                        CROSS JOIN LATERAL (
                            SELECT x.ctid FROM {self.t}_post x
                            WHERE {on} AND x.lexeme = l.lexeme OFFSET 0
                        ) x)"""

    def delete(self) -> str:
        """Delete the postings whose ``ctid`` are in the array ``$1`` (from
        :meth:`found`, in the same transaction: the rows they index are locked by the
        write that fired the trigger, so no other writer moves them). Planned with the
        array's length known, so a few postings of a big tenant are fetched by ``ctid``,
        not found by a scan of the tenant's postings."""
        return f"DELETE FROM {self.t}_post WHERE ctid = ANY ($1)"

    def kept(self, outer: str, inner: str) -> str:
        """``inner`` is the same row as ``outer`` with the same ``tsv`` and extras."""
        return " AND ".join(
            f"{inner}.{c} = {outer}.{c}" for c in [*self.row_key, "tsv", *self.extras]
        )

    def sync(self) -> str:
        """``<t>_post_sync()``, the function of the three statement-level triggers.

        An update rewrites the postings of the rows whose ``tsv`` or extras changed
        (or whose key did) and of no other row, so a reindex writing vectors changes
        no posting. Its statements run through ``EXECUTE``, planned at each call for
        that call's transition tables: a plan cached from a small first call would
        join the old and new rows by a nested loop, quadratic in a big one's rows.
        The changed rows are a materialized CTE, so the tenant condition that
        row-level security adds to the postings is not pushed into their anti-join
        (it makes the planner expect a handful of rows, and pick that nested loop).
        An update or delete first finds its old postings (:meth:`found`), then
        deletes them by ``ctid`` (:meth:`delete`), and nothing when there are none
        (a reindex's vectors-only batch)."""
        t = self.t
        old = ", ".join(f"y.{c}" for c in [*self.row_key, "tsv"])
        changed = self.found(
            "changed",
            f"""WITH changed AS MATERIALIZED (
                    SELECT {old} FROM old_rows y
                    WHERE NOT EXISTS (SELECT 1 FROM new_rows n WHERE {self.kept("y", "n")}))""",
        )
        fresh = self.insert(f"NOT EXISTS (SELECT 1 FROM old_rows y WHERE {self.kept('y', 'n')})")
        return f"""CREATE OR REPLACE FUNCTION {t}_post_sync() RETURNS trigger
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
            DECLARE
                gone tid[];
            BEGIN
                IF TG_OP = 'INSERT' THEN
                    {self.insert("true")};
                ELSIF TG_OP = 'DELETE' THEN
                    EXECUTE $q${self.found("old_rows")}$q$ INTO gone;
                ELSIF EXISTS (SELECT FROM old_rows) THEN
                    EXECUTE $q${changed}$q$ INTO gone;
                ELSE
                    RETURN NULL;  -- an update of no row
                END IF;
                IF cardinality(gone) > 0 THEN
                    EXECUTE $q${self.delete()}$q$ USING gone;
                END IF;
                IF TG_OP = 'UPDATE' THEN
                    EXECUTE $q${fresh}$q$;
                END IF;
                RETURN NULL;
            END $fn$"""


def _postings(t: str, p: str, keys: str, extra: str = "") -> tuple[str, ...]:
    """``<t>_post``: one row per lexeme of each row of ``t`` (its keys, the lexeme, its
    ``tf`` (positions) and the row's ``dl`` (distinct lexemes), and ``extra``
    columns), the index path's bm25 input. Its primary key ``(tenant, ns, lexeme,
    keys) INCLUDE (tf, dl, extra)`` hands a query's postings to an index-only scan:
    the scope's matches and everything bm25 needs, without reading a ``tsvector``
    (see :mod:`~tulip_memory.store.postgres.plan`). Statement-level triggers keep it
    in the writer's transaction (:meth:`_Postings.sync`, as migration 18 left it).
    Tenant-scoped like ``t``; the backfill reads ``t`` as its owner, with row-level
    security unforced inside the migration's transaction only. ``<t>_lex``, which it
    replaces, is dropped."""
    post = _Postings(t, keys, extra)
    included = ", ".join(["tf", "dl", *post.extras])
    backfill = post.insert("true").replace("FROM new_rows n", f"FROM {t} n", 1)
    return (
        f"""CREATE TABLE {t}_post (
            tenant text NOT NULL,
            ns text NOT NULL,
            lexeme text NOT NULL,
            {_lex_columns([*post.keys, "tf", "dl", *post.extras])},
            PRIMARY KEY ({", ".join(post.pk)}) INCLUDE ({included})
        )""",
        post.sync(),
        *_sync_triggers(t, p, "post"),
        f"ALTER TABLE {t} NO FORCE ROW LEVEL SECURITY",
        backfill,
        f"ALTER TABLE {t} FORCE ROW LEVEL SECURITY",
        *tenant_rls(f"{t}_post", f"{p}_post"),
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {t}_post TO tulip_dml, tulip_ops",
        *(f"DROP TRIGGER {p}_lex_{op} ON {t}" for op in ("insert", "update", "delete")),
        f"DROP FUNCTION {t}_lex_sync()",
        f"DROP TABLE {t}_lex",
    )


def _lexeme_df(t: str, p: str) -> tuple[str, ...]:
    """``<t>_df``: how many rows of each namespace hold each lexeme (its postings in
    ``<t>_post``), and bounds of those postings' ``tf`` (at most ``tf_max``) and ``dl``
    (at least ``dl_min``). The index path reads a query lexeme's ``df`` as one row
    instead of counting its postings (a common word's 50,000 of them: ~3 ms a lexeme),
    and bounds what the lexeme can add to a row's bm25 before reading any of its
    postings (:func:`~tulip_memory.store.postgres.sql._indexed`). Statement-level
    triggers on the postings keep it, in the writer's transaction: an insert adds each
    lexeme's new postings (the rows an ``ON CONFLICT`` updated instead are not new) and
    widens the bounds; a delete takes them away and drops the lexemes left with none,
    leaving the bounds as they were (still bounds, perhaps loose ones). Every change
    first locks the namespaces' row counters (``<t>_ns_stats``, which an insert or a
    delete locks anyway), so the writers of one namespace take its lexemes' counters one
    transaction at a time: an update's postings are deleted and inserted by two
    statements, each taking its lexemes in key order, and two updates taking them
    without it deadlocked (60 concurrent upserts of 12 keys: every run). Tenant-scoped
    like ``t``; the backfill counts the postings as their owner, with row-level security
    unforced inside the migration's transaction only, after the triggers exist (creating
    them waits for the postings' writers, and holds the next ones off until the commit)."""
    return (
        f"""CREATE TABLE {t}_df (
            tenant text NOT NULL,
            ns text NOT NULL,
            lexeme text NOT NULL,
            df bigint NOT NULL,
            tf_max integer NOT NULL,
            dl_min integer NOT NULL,
            PRIMARY KEY (tenant, ns, lexeme)
        )""",
        f"""CREATE FUNCTION {t}_df_count() RETURNS trigger
            LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
            BEGIN
                IF TG_OP = 'INSERT' THEN
                    PERFORM FROM {t}_ns_stats s JOIN (SELECT DISTINCT tenant, ns FROM new_rows) g
                        ON s.tenant = g.tenant AND s.ns = g.ns
                    ORDER BY s.tenant, s.ns FOR UPDATE OF s;
                    INSERT INTO {t}_df AS s (tenant, ns, lexeme, df, tf_max, dl_min)
                    SELECT tenant, ns, lexeme, count(*), max(tf), min(dl) FROM new_rows
                    GROUP BY tenant, ns, lexeme ORDER BY tenant, ns, lexeme
                    ON CONFLICT (tenant, ns, lexeme) DO UPDATE
                    SET df = s.df + EXCLUDED.df, tf_max = greatest(s.tf_max, EXCLUDED.tf_max),
                        dl_min = least(s.dl_min, EXCLUDED.dl_min);
                ELSE
                    PERFORM FROM {t}_ns_stats s JOIN (SELECT DISTINCT tenant, ns FROM old_rows) g
                        ON s.tenant = g.tenant AND s.ns = g.ns
                    ORDER BY s.tenant, s.ns FOR UPDATE OF s;
                    PERFORM FROM {t}_df s JOIN (SELECT DISTINCT tenant, ns, lexeme FROM old_rows) g
                        ON s.tenant = g.tenant AND s.ns = g.ns AND s.lexeme = g.lexeme
                    ORDER BY s.tenant, s.ns, s.lexeme FOR UPDATE OF s;
                    UPDATE {t}_df s SET df = s.df - g.n
                    FROM (SELECT tenant, ns, lexeme, count(*) AS n FROM old_rows
                          GROUP BY tenant, ns, lexeme) g
                    WHERE s.tenant = g.tenant AND s.ns = g.ns AND s.lexeme = g.lexeme;
                    DELETE FROM {t}_df s USING (SELECT DISTINCT tenant, ns, lexeme FROM old_rows) g
                    WHERE s.tenant = g.tenant AND s.ns = g.ns AND s.lexeme = g.lexeme
                      AND s.df <= 0;
                END IF;
                RETURN NULL;
            END $fn$""",
        f"""CREATE TRIGGER {p}_df_insert AFTER INSERT ON {t}_post
            REFERENCING NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION {t}_df_count()""",
        f"""CREATE TRIGGER {p}_df_delete AFTER DELETE ON {t}_post
            REFERENCING OLD TABLE AS old_rows
            FOR EACH STATEMENT EXECUTE FUNCTION {t}_df_count()""",
        f"ALTER TABLE {t}_post NO FORCE ROW LEVEL SECURITY",
        f"""INSERT INTO {t}_df (tenant, ns, lexeme, df, tf_max, dl_min)
            SELECT tenant, ns, lexeme, count(*), max(tf), min(dl) FROM {t}_post
            GROUP BY tenant, ns, lexeme""",
        f"ALTER TABLE {t}_post FORCE ROW LEVEL SECURITY",
        *tenant_rls(f"{t}_df", f"{p}_df"),
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {t}_df TO tulip_dml, tulip_ops",
    )


_LEX_TYPES = {
    "key": "text",
    "event_id": "text",
    "position": "integer",
    "tsv": "tsvector",
    "tf": "integer",
    "dl": "integer",
    "created_at": "timestamptz",
}


def _lex_columns(cols: list[str]) -> str:
    return ",\n            ".join(f"{c} {_LEX_TYPES[c]} NOT NULL" for c in cols)


#: The columns of a reindex job the application role reads: ids, slot, model and
#: status. Not ``error`` (a model's or a batch's message, naming the tenant and range
#: that failed) nor ``previous`` (the slot each layout row read, by tenant): those are
#: the operator's.
_JOB_READ_COLUMNS = """id, scope, slot, model, spec, api_base, dim, batch, planned_rows, status,
    created_at, updated_at, switched_at, finalized_at"""


def _halfvec_indexes(t: str) -> str:
    """Migration 19: every HNSW index of ``t`` and ``<t>_turns`` over a slot's vectors
    (the original slot's from migrations 3 and 12, a reindex's ``<p>_v<job>``) built
    again on the slot as ``halfvec(width)`` with ``halfvec_cosine_ops``
    (:func:`~tulip_memory.store.postgres.slots.ann_using`), under the same name: each
    slot at its own column's width, which a reindex may have changed. The build is
    sized as a reindex's (``reindexer.build_resources``: 2 bytes a dimension and the
    neighbour lists, between 64 MB and 4 GB), in the server's parallel maintenance
    workers.

    Every new index is built beside the old one first (``CREATE INDEX`` takes a share
    lock: recall goes on reading the tables, their writes wait), and only then are the
    old ones dropped and the new ones given their names, which needs the tables to
    itself from there to the commit, right after: dropping first would have held recall
    off for the whole build. ``bench/recall.py``'s 200,000 memories and 220,100 turns of
    384 dimensions took 269 s on 2 cores (no parallel workers there, see
    :mod:`tulip_ops.dev.server_settings`)."""
    found = f"""SELECT i.indexrelid AS oid, i.indexrelid::regclass::text AS idx,
                       c.relname AS name, n.nspname AS nsp,
                       i.indrelid::regclass::text AS tbl,
                       a.attname AS col, a.atttypmod AS dim,
                       greatest(t.reltuples, 0) AS rows
                FROM pg_index i
                JOIN pg_class c ON c.oid = i.indexrelid
                JOIN pg_namespace n ON n.oid = c.relnamespace
                JOIN pg_class t ON t.oid = i.indrelid
                JOIN pg_am am ON am.oid = c.relam AND am.amname = 'hnsw'
                JOIN pg_opclass o ON o.oid = i.indclass[0] AND o.opcname = 'vector_cosine_ops'
                JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                WHERE i.indrelid IN ('{t}'::regclass, '{t}_turns'::regclass)
                ORDER BY c.relname"""
    return f"""DO $do$
        DECLARE
            r record;
        BEGIN
            IF to_regtype('halfvec') IS NULL THEN
                RETURN;  -- pgvector before 0.7: its indexes stay (the index path needs 0.8)
            END IF;
            FOR r IN {found}
            LOOP
                PERFORM set_config('maintenance_work_mem', least(4096, greatest(64,
                    ceil(r.rows * (2 * r.dim + 32 * 8 + 64) * 1.5 / 1048576)))::int || 'MB',
                    true);
                EXECUTE format('CREATE INDEX %I ON %s USING hnsw ((%I::halfvec(%s)) '
                               'halfvec_cosine_ops)', 'tulip_m19_' || r.oid, r.tbl, r.col,
                               r.dim);
            END LOOP;
            FOR r IN {found}
            LOOP
                EXECUTE format('DROP INDEX %s', r.idx);
                EXECUTE format('ALTER INDEX %I.%I RENAME TO %I', r.nsp, 'tulip_m19_' || r.oid,
                               r.name);
            END LOOP;
        END $do$"""


def _graphs() -> tuple[str, ...]:
    """Migration 22: ``<t>_graphs``, the registry of the namespaces' own graphs
    (:mod:`~tulip_memory.store.postgres.graphs`): one row per graph, its index
    ``<p>_own<id>`` over the ``kind`` table's ``slot``, ``ready`` once the index is built.
    Under forced row-level security the application role reads its tenant's rows (a
    search chooses its plan from them) and writes none; the owner role, which builds
    and drops the graphs, reads and writes every row; ``tulip_ops`` reads them all.

    And the statistics that let the planner read such a graph: a namespace's rows all
    share one key, so ``GRAPH_KEY = k`` keeps every row the namespace's condition
    kept. Without the dependency, the planner multiplies the two selectivities as if
    independent, expects a handful of rows, and sorts them rather than scan a graph
    (a 12,000-row namespace's scope estimated at 5 rows). The statistics are filled by
    the next ``ANALYZE`` (autovacuum's, or the graphs' refresh's)."""
    return (
        """CREATE TABLE {t}_graphs (
            id bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
            kind text NOT NULL CHECK (kind IN ('memories', 'turns')),
            tenant text NOT NULL,
            ns text NOT NULL,
            slot text NOT NULL,
            rows bigint NOT NULL,
            ready boolean NOT NULL DEFAULT false,
            created_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (kind, tenant, ns, slot)
        )""",
        "ALTER TABLE {t}_graphs ENABLE ROW LEVEL SECURITY",
        "ALTER TABLE {t}_graphs FORCE ROW LEVEL SECURITY",
        """CREATE POLICY {p}_graphs_tenant ON {t}_graphs FOR SELECT TO tulip_dml
            USING (tenant = current_setting('tulip.tenant', true))""",
        """CREATE POLICY {p}_graphs_owner ON {t}_graphs TO tulip_owner
            USING (true) WITH CHECK (true)""",
        "GRANT SELECT ON {t}_graphs TO tulip_dml, tulip_ops",
        *(
            f"""CREATE STATISTICS {p}_graph_key (dependencies)
                ON tenant, ns, ({GRAPH_KEY}) FROM {t}"""
            for t, p in (("{t}", "{p}"), ("{t}_turns", "{p}_turns"))
        ),
    )


def _reindex_tenancy() -> tuple[str, ...]:
    """Migration 14: ``<t>_layout``, ``<t>_reindex_jobs`` and ``<t>_reindex_ranges``
    under forced row-level security. Their tenant is ``scope`` for layouts and jobs
    (``''``: the all-tenants row, holding slot names, ids and statuses) and ``tenant``
    for ranges. Pinned to a tenant, the application role reads its own rows and the
    all-tenants ones (a batch marks its own range done, pauses its job); no role
    without a policy reads any. The owner role, which runs the reindex's layout
    changes for every tenant at once, reads and writes every row: it owns the tables,
    so row-level security was never a bound on it. ``tulip_ops`` bypasses it."""
    tenant = "current_setting('tulip.tenant', true)"
    out: list[str] = []
    for table, column, scoped in (
        ("layout", "scope", True),
        ("reindex_jobs", "scope", True),
        ("reindex_ranges", "tenant", False),
    ):
        mine = f"{column} = {tenant}"
        visible = f"({column} = '' OR {mine})" if scoped else f"({mine})"
        only = "FOR SELECT " if table == "layout" else ""  # the registry is read-only
        check = "" if only else f"\n                WITH CHECK {visible}"
        out += [
            f"ALTER TABLE {{t}}_{table} ENABLE ROW LEVEL SECURITY",
            f"ALTER TABLE {{t}}_{table} FORCE ROW LEVEL SECURITY",
            f"""CREATE POLICY {{p}}_{table}_tenant ON {{t}}_{table} {only}TO tulip_dml
                USING {visible}{check}""",
            f"""CREATE POLICY {{p}}_{table}_owner ON {{t}}_{table} TO tulip_owner
                USING (true) WITH CHECK (true)""",
        ]
    return (
        *out,
        "REVOKE SELECT ON {t}_reindex_jobs FROM tulip_dml",
        f"GRANT SELECT ({_JOB_READ_COLUMNS}) ON {{t}}_reindex_jobs TO tulip_dml",
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "memories table",
        (
            """CREATE TABLE {t} (
                tenant text NOT NULL,
                ns text NOT NULL,
                key text NOT NULL,
                value jsonb NOT NULL,
                metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
                content text NOT NULL DEFAULT '',
                embedding vector({dim}),
                created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                version integer NOT NULL DEFAULT 1,
                PRIMARY KEY (tenant, ns, key)
            )""",
            "CREATE INDEX {p}_recent ON {t} (tenant, ns, updated_at DESC, key)",
        ),
    ),
    Migration(
        2,
        "tenant row-level security",
        (*tenant_rls(),),
    ),
    Migration(
        3,
        "hnsw cosine index",
        ("CREATE INDEX {p}_hnsw ON {t} USING hnsw (embedding vector_cosine_ops)",),
        needs_ann=True,
    ),
    Migration(
        4,
        "source event sequence for fencing",
        ("ALTER TABLE {t} ADD COLUMN source_seq bigint",),
    ),
    Migration(
        5,
        "conversation turns beside the memories",
        (
            """CREATE TABLE {t}_turns (
                tenant text NOT NULL,
                ns text NOT NULL,
                thread_id text NOT NULL,
                event_id text NOT NULL,
                position integer NOT NULL,
                text text NOT NULL,
                turn jsonb NOT NULL,
                metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
                embedding vector({dim}),
                source_seq bigint,
                created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                PRIMARY KEY (tenant, ns, event_id, position)
            )""",
            "CREATE INDEX {p}_turns_ns ON {t}_turns (tenant, ns, created_at DESC)",
            *tenant_rls("{t}_turns", "{p}_turns"),
        ),
    ),
    Migration(
        6,
        "full-text search over memory content and turn text",
        (
            """ALTER TABLE {t} ADD COLUMN tsv tsvector
                GENERATED ALWAYS AS (to_tsvector({tsconfig}, content)) STORED""",
            "CREATE INDEX {p}_tsv ON {t} USING gin (tsv)",
            """ALTER TABLE {t}_turns ADD COLUMN tsv tsvector
                GENERATED ALWAYS AS (to_tsvector({tsconfig}, text)) STORED""",
            "CREATE INDEX {p}_turns_tsv ON {t}_turns USING gin (tsv)",
        ),
    ),
    Migration(
        7,
        "vector slots per embedding model and online reindex jobs",
        (
            """CREATE TABLE {t}_slots (
                slot text PRIMARY KEY,
                model text NOT NULL,
                dim integer NOT NULL,
                spec text,
                api_base text,
                created_at timestamptz NOT NULL DEFAULT clock_timestamp()
            )""",
            """CREATE TABLE {t}_layout (
                scope text PRIMARY KEY,
                read_slot text NOT NULL,
                write_slots text[] NOT NULL
            )""",
            "INSERT INTO {t}_layout VALUES ('', 'embedding', ARRAY['embedding'])",
            "CREATE SEQUENCE {t}_layout_version",
            """CREATE TABLE {t}_reindex_jobs (
                id bigserial PRIMARY KEY,
                scope text NOT NULL,
                slot text NOT NULL,
                model text NOT NULL,
                spec text NOT NULL,
                api_base text,
                dim integer NOT NULL,
                batch integer NOT NULL,
                planned_rows bigint NOT NULL DEFAULT 0,
                status text NOT NULL,
                error text,
                previous jsonb NOT NULL DEFAULT '{}'::jsonb,
                created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                switched_at timestamptz,
                finalized_at timestamptz
            )""",
            """CREATE UNIQUE INDEX {p}_reindex_open ON {t}_reindex_jobs (scope)
                WHERE status <> 'finalized'""",
            """CREATE TABLE {t}_reindex_ranges (
                job bigint NOT NULL REFERENCES {t}_reindex_jobs (id) ON DELETE CASCADE,
                id integer NOT NULL,
                tenant text NOT NULL,
                kind text NOT NULL,
                lo jsonb,
                hi jsonb,
                status text NOT NULL DEFAULT 'pending',
                rows integer NOT NULL DEFAULT 0,
                runs integer NOT NULL DEFAULT 0,
                finished_at timestamptz,
                PRIMARY KEY (job, id)
            )""",
        ),
    ),
    Migration(
        8,
        "a thread's latest turn, found by sequence",
        (
            """CREATE INDEX {p}_turns_thread
                ON {t}_turns (tenant, ns, thread_id, source_seq DESC, position DESC)""",
        ),
    ),
    Migration(
        9,
        "when and from which messages a memory was observed",
        (
            # From the row's metadata (the extraction worker writes epoch seconds and
            # message ids there); a value that is not a time in range stays NULL, so
            # no write can fail on it.
            """ALTER TABLE {t} ADD COLUMN observed_at timestamptz GENERATED ALWAYS AS (
                CASE WHEN jsonb_typeof(metadata -> 'observed_at') = 'number'
                      AND (metadata ->> 'observed_at')::numeric BETWEEN 0 AND 32503680000
                THEN to_timestamp((metadata ->> 'observed_at')::float8) END) STORED""",
            "CREATE INDEX {p}_observed ON {t} (tenant, ns, observed_at DESC)",
            """CREATE INDEX {p}_sources ON {t}
                USING gin ((metadata -> 'source_ids') jsonb_path_ops)""",
        ),
    ),
    Migration(
        10,
        "the owner role owns; the application role gets DML and reads the registries",
        (
            # tulip_dml: the application role's privileges (it is a member, owns nothing);
            # tulip_ops: the admin tools' (BYPASSRLS, never superuser). See
            # tulip_memory.store.postgres.admin.
            "GRANT SELECT, INSERT, UPDATE, DELETE ON {t}, {t}_turns TO tulip_dml",
            "GRANT SELECT ON {t}_slots, {t}_layout, {t}_migrations TO tulip_dml",
            "GRANT SELECT ON SEQUENCE {t}_layout_version TO tulip_dml",
            # A batch marks its range done and may pause its job with the model's error.
            "GRANT SELECT, UPDATE (status, error, updated_at) ON {t}_reindex_jobs TO tulip_dml",
            """GRANT SELECT, UPDATE (status, rows, runs, finished_at)
                ON {t}_reindex_ranges TO tulip_dml""",
            """GRANT SELECT, INSERT, UPDATE, DELETE ON {t}, {t}_turns, {t}_slots, {t}_layout,
                {t}_reindex_jobs, {t}_reindex_ranges, {t}_migrations TO tulip_ops""",
            """GRANT SELECT, USAGE, UPDATE ON SEQUENCE {t}_layout_version,
                {t}_reindex_jobs_id_seq TO tulip_ops""",
        ),
    ),
    Migration(
        11,
        "namespace counters for the recall plan",
        (
            *_ns_stats("{t}", "{p}"),
            *_ns_stats("{t}_turns", "{p}_turns"),
            # The triggers run as the writer: the application role keeps the counters.
            "GRANT SELECT, INSERT, UPDATE ON {t}_ns_stats, {t}_turns_ns_stats TO tulip_dml",
            """GRANT SELECT, INSERT, UPDATE, DELETE ON {t}_ns_stats, {t}_turns_ns_stats
                TO tulip_ops""",
        ),
    ),
    Migration(
        12,
        "hnsw cosine index over turns",
        ("CREATE INDEX {p}_turns_hnsw ON {t}_turns USING hnsw (embedding vector_cosine_ops)",),
        needs_ann=True,
    ),
    Migration(
        13,
        "namespace counters: count from the table only namespaces without a counter",
        (_ns_count_by_fresh_namespace("{t}"), _ns_count_by_fresh_namespace("{t}_turns")),
    ),
    Migration(
        14,
        "reindex layouts, jobs and ranges are their tenant's, under forced row-level security",
        _reindex_tenancy(),
    ),
    Migration(
        15,
        "a reindex job's row count is the operator's",
        # An all-tenants job's count sums every tenant's rows; batches never read it.
        ("REVOKE SELECT (planned_rows) ON {t}_reindex_jobs FROM tulip_dml",),
    ),
    Migration(
        16,
        "narrow lexical tables for the index path's bm25",
        (
            *_lexicon("{t}", "{p}", "key"),
            *_lexicon("{t}_turns", "{p}_turns", "event_id, position", ", created_at"),
            # No statement reads the wide tables' GIN indexes any more; each cost writes.
            "DROP INDEX {t}_tsv",
            "DROP INDEX {t}_turns_tsv",
        ),
    ),
    Migration(
        17,
        "postings tables for the index path's bm25, in place of the narrow lexical tables",
        (
            *_postings("{t}", "{p}", "key"),
            *_postings("{t}_turns", "{p}_turns", "event_id, position", ", created_at"),
        ),
    ),
    Migration(
        18,
        "postings kept by index lookups on their whole key, planned per statement",
        # Tables migrated before 18 run 17's first trigger body: under forced row-level
        # security an update or delete of n rows read each row's whole namespace of
        # postings (a 512-row reindex batch: 1.2 s). 17 now creates this body itself.
        (
            _Postings("{t}", "key").sync(),
            _Postings("{t}_turns", "event_id, position", ", created_at").sync(),
        ),
    ),
    Migration(
        19,
        "hnsw indexes over each slot's vectors as halfvec",
        (_halfvec_indexes("{t}"),),
    ),
    Migration(
        20,
        "each namespace's lexeme counts, so the index path reads a df instead of counting",
        (*_lexeme_df("{t}", "{p}"), *_lexeme_df("{t}_turns", "{p}_turns")),
    ),
    Migration(
        21,
        "postings of updated and deleted rows found by their whole key, deleted by ctid",
        # Tables migrated before 21 run 18's body, whose delete was a join the planner
        # could plan as a scan of each row's namespace of postings (_Postings.found);
        # 17 and 18 now create this body themselves.
        (
            _Postings("{t}", "key").sync(),
            _Postings("{t}_turns", "event_id, position", ", created_at").sync(),
        ),
    ),
    Migration(22, "the registry of namespaces' own HNSW graphs", _graphs()),
)


MEMORIES = Family("memories", MIGRATIONS)


def names(*, name: str, dim: int, tsconfig: str) -> dict[str, object]:
    """The placeholders of :data:`MEMORIES` (but ``{t}``) for one table: ``name`` its
    bare name, ``dim`` its vector width; ``tsconfig`` must already be a validated
    configuration name (no quotes can occur in it)."""
    if "'" in tsconfig:
        raise ValueError(f"not a text search configuration name: {tsconfig!r}")
    return {"p": name, "dim": dim, "tsconfig": f"'{tsconfig}'::regconfig"}


def expected(table: str, name: str) -> dict[str, Expected]:
    """What the migrations leave on ``table`` and its companion tables (for
    :func:`~tulip_memory.store.postgres.audit.audit`)."""
    return MEMORIES.expected(table, names(name=name, dim=1, tsconfig="simple"))

"""Statements of the online reindex, over ``{t}`` (the qualified memories table),
``{p}`` (its bare name) and ``{v}`` (a slot column); values travel as parameters.

Layouts, jobs and ranges are their tenant's, under forced row-level security
(migration 14): a job's scope and a range's tenant name it, ``''`` being every
tenant. A batch runs pinned to the tenant its task names: it reads its job (without
the operator's columns, ``error`` and ``previous``: :data:`APP_JOB_COLS`), its own
range, and the rows, and marks the range done, all under row-level security. The
operator's reads (progress, pending ranges, the switch) go through the owner role,
which reads every row.
"""

from __future__ import annotations

JOB_COLS = """id, scope, slot, model, spec, api_base, dim, batch, planned_rows, status, error,
previous, created_at, updated_at, switched_at, finalized_at"""

#: What the application role reads of a job (the columns migrations 14 and 15 leave it).
APP_JOB_COLS = """id, scope, slot, model, spec, api_base, dim, batch, 0::bigint AS planned_rows,
status, NULL::text AS error, '{}'::jsonb AS previous, created_at, updated_at, switched_at,
finalized_at"""

OPEN_JOBS = f"SELECT {JOB_COLS} FROM {{t}}_reindex_jobs WHERE status <> 'finalized' ORDER BY id"

# ``{cols}``: JOB_COLS (the owner's) or APP_JOB_COLS.
JOB = "SELECT {cols} FROM {t}_reindex_jobs WHERE id = $1"

JOB_FOR_UPDATE = f"SELECT {JOB_COLS} FROM {{t}}_reindex_jobs WHERE id = $1 FOR UPDATE"

LATEST_JOB = """
SELECT {cols} FROM {t}_reindex_jobs WHERE scope = $1
ORDER BY (status <> 'finalized') DESC, id DESC LIMIT 1"""

# Held (session-level) by the one process switching a job; released when it is done.
FINISH_LOCK = "SELECT pg_try_advisory_lock(hashtext($1))"

JOB_STATUS_SHARE = "SELECT status FROM {t}_reindex_jobs WHERE id = $1 FOR SHARE"

INSERT_JOB = """
INSERT INTO {t}_reindex_jobs (scope, slot, model, spec, api_base, dim, batch, status)
VALUES ($1, '', $2, $3, $4, $5, $6, 'planning')
RETURNING id"""

SET_JOB_SLOT = "UPDATE {t}_reindex_jobs SET slot = $2 WHERE id = $1"

SET_STATUS = """
UPDATE {t}_reindex_jobs SET status = $2, error = $3, updated_at = clock_timestamp()
WHERE id = $1"""

PAUSE = """
UPDATE {t}_reindex_jobs SET status = 'paused', error = $2, updated_at = clock_timestamp()
WHERE id = $1 AND status = 'running'"""

SET_PLANNED = """
UPDATE {t}_reindex_jobs SET planned_rows = $2, status = 'running', error = NULL,
    updated_at = clock_timestamp()
WHERE id = $1"""

SWITCHED = """
UPDATE {t}_reindex_jobs SET status = 'switched', previous = $2::jsonb,
    switched_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE id = $1"""

FINALIZED = """
UPDATE {t}_reindex_jobs SET status = 'finalized', error = $2,
    finalized_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE id = $1"""

# -- slots and layouts --------------------------------------------------------------

ADD_COLUMN = "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS {v} vector({dim})"

ADD_TURNS_COLUMN = "ALTER TABLE {t}_turns ADD COLUMN IF NOT EXISTS {v} vector({dim})"

DROP_COLUMN = "ALTER TABLE {t} DROP COLUMN IF EXISTS {v}"

DROP_TURNS_COLUMN = "ALTER TABLE {t}_turns DROP COLUMN IF EXISTS {v}"

# Built outside any transaction, so writes go on while it builds; ``{using}`` is the
# slot's ``slots.ann_using`` (the index the recall plan's index path orders by).
CREATE_INDEX = "CREATE INDEX CONCURRENTLY IF NOT EXISTS {i} ON {t} {using}"

CREATE_TURNS_INDEX = CREATE_INDEX.replace("ON {t} ", "ON {t}_turns ")

# The build's memory, for the session: pgvector builds the HNSW graph in
# maintenance_work_mem (a graph that outgrows it is built several times slower), with
# parallel workers when the server has them. $1 the memory, $2 the workers.
BUILD_SETTINGS = """
SELECT set_config('maintenance_work_mem', $1, false),
       set_config('max_parallel_maintenance_workers', $2, false)"""

# A table's rows (planner estimate), the server's bound on worker processes and its
# setting for parallel maintenance workers.
BUILD_SIZE = """
SELECT greatest(c.reltuples, 0)::float8 AS rows,
       current_setting('max_worker_processes')::int AS workers,
       current_setting('max_parallel_maintenance_workers')::int AS maintenance_workers
FROM pg_class c WHERE c.oid = to_regclass($1)"""

INDEX_VALID = """
SELECT i.indisvalid FROM pg_index i
WHERE i.indexrelid = to_regclass($1)"""

DROP_INDEX = "DROP INDEX IF EXISTS {i}"

# Whether recall of a scope (``$1``, ``''``: every tenant) may read a slot's HNSW index:
# it holds a namespace of at least ``$2`` rows (the recall plan's least for the index
# path), among the memories and among the turns. Read where every counter of the
# scope shows: as ``tulip_ops``, or pinned to the tenant.
INDEXED_SCOPES = """
SELECT EXISTS (SELECT 1 FROM {t}_ns_stats WHERE ($1 = '' OR tenant = $1) AND rows >= $2)
           AS memories,
       EXISTS (SELECT 1 FROM {t}_turns_ns_stats WHERE ($1 = '' OR tenant = $1) AND rows >= $2)
           AS turns"""

SLOT_MODEL = "SELECT model FROM {t}_slots WHERE slot = $1"

SLOT_DIMS = "SELECT slot, dim FROM {t}_slots"

INSERT_SLOT = """
INSERT INTO {t}_slots (slot, model, dim, spec, api_base) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (slot) DO NOTHING"""

DELETE_SLOT = "DELETE FROM {t}_slots WHERE slot = $1"

LAYOUTS = "SELECT scope, read_slot, write_slots FROM {t}_layout ORDER BY scope"

ADD_WRITE_SLOT_ALL = """
UPDATE {t}_layout SET write_slots = array_append(write_slots, $1)
WHERE NOT $1 = ANY (write_slots)"""

# A tenant's own layout row: a copy of its effective layout, plus the new slot.
ADD_WRITE_SLOT_TENANT = """
INSERT INTO {t}_layout (scope, read_slot, write_slots)
SELECT $1, l.read_slot, array_append(l.write_slots, $2)
FROM (SELECT read_slot, write_slots FROM {t}_layout
      WHERE scope = $1 OR scope = '' ORDER BY scope = '' LIMIT 1) l
ON CONFLICT (scope) DO UPDATE SET write_slots = array_append({t}_layout.write_slots, $2)
WHERE NOT $2 = ANY ({t}_layout.write_slots)"""

READ_SLOT_ALL = "UPDATE {t}_layout SET read_slot = $1"

READ_SLOT_TENANT = "UPDATE {t}_layout SET read_slot = $2 WHERE scope = $1"

# Writes fill only the slot recall reads (a finalize); $1 scope, NULL for every row.
KEEP_READ_SLOT = """
UPDATE {t}_layout SET write_slots = ARRAY[read_slot] WHERE $1::text IS NULL OR scope = $1"""

DROP_WRITE_SLOT = """
UPDATE {t}_layout SET write_slots = array_remove(write_slots, $1)
WHERE $2::text IS NULL OR scope = $2"""

SLOT_IN_USE = """
SELECT EXISTS (SELECT 1 FROM {t}_layout WHERE read_slot = $1 OR $1 = ANY (write_slots))"""

CLEAR_TENANT_SLOT = "UPDATE {t} SET {v} = NULL WHERE tenant = $1 AND {v} IS NOT NULL"

CLEAR_TENANT_TURNS_SLOT = "UPDATE {t}_turns SET {v} = NULL WHERE tenant = $1 AND {v} IS NOT NULL"

# -- planning -------------------------------------------------------------------------

ROLE_SEES_ALL = """
SELECT rolname, rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user"""

# Every tenant with rows; a loose index scan over the primary keys' leading column
# (needs a role that bypasses row-level security).
TENANTS = """
WITH RECURSIVE m AS (
    SELECT min(tenant) AS tenant FROM {t}
    UNION ALL
    SELECT (SELECT min(tenant) FROM {t} WHERE tenant > m.tenant) FROM m WHERE m.tenant IS NOT NULL
), u AS (
    SELECT min(tenant) AS tenant FROM {t}_turns
    UNION ALL
    SELECT (SELECT min(tenant) FROM {t}_turns WHERE tenant > u.tenant)
    FROM u WHERE u.tenant IS NOT NULL
)
SELECT tenant FROM m WHERE tenant IS NOT NULL
UNION SELECT tenant FROM u WHERE tenant IS NOT NULL
ORDER BY tenant"""

# The first key of every ``$2`` rows of a tenant in key order, and the row count.
MEMORY_BOUNDS = """
SELECT jsonb_build_array(ns, key)::text AS lo, total FROM (
    SELECT ns, key, row_number() OVER (ORDER BY ns, key) AS rn, count(*) OVER () AS total
    FROM {t} WHERE tenant = $1
) x WHERE rn % $2 = 1 ORDER BY rn"""

TURN_BOUNDS = """
SELECT jsonb_build_array(ns, event_id, position)::text AS lo, total FROM (
    SELECT ns, event_id, position, count(*) OVER () AS total,
           row_number() OVER (ORDER BY ns, event_id, position) AS rn
    FROM {t}_turns WHERE tenant = $1
) x WHERE rn % $2 = 1 ORDER BY rn"""

INSERT_RANGES = """
INSERT INTO {t}_reindex_ranges (job, id, tenant, kind, lo, hi)
SELECT $1, u.id, u.tenant, u.kind, u.lo::jsonb, u.hi::jsonb
FROM unnest($2::int[], $3::text[], $4::text[], $5::text[], $6::text[])
     AS u(id, tenant, kind, lo, hi)
ON CONFLICT DO NOTHING"""

DELETE_RANGES = "DELETE FROM {t}_reindex_ranges WHERE job = $1"

# The pacer's probe (see reindex.pacing): a fixed amount of work that reads no table,
# so its time moves only with how long it waits for a core: ~5 ms on an idle server, as
# long as a recall query (a shorter one is scheduled first and misses the queueing).
LOAD_PROBE = "SELECT count(*) FROM generate_series(1, 100000)"

# -- batches --------------------------------------------------------------------------

# A batch's own range: of the tenant its task names (pinned, and here again), so a
# task naming another tenant's range finds nothing.
RANGE = """
SELECT id, tenant, kind, lo::text, hi::text, status FROM {t}_reindex_ranges
WHERE job = $1 AND id = $2 AND tenant = $3"""

PENDING_RANGES = """
SELECT id, tenant FROM {t}_reindex_ranges WHERE job = $1 AND status = 'pending' ORDER BY id"""

RANGE_TENANTS = "SELECT DISTINCT tenant FROM {t}_reindex_ranges WHERE job = $1 ORDER BY tenant"

RANGE_DONE = """
UPDATE {t}_reindex_ranges SET status = 'done', rows = $3, runs = runs + 1,
    finished_at = clock_timestamp()
WHERE job = $1 AND id = $2 AND status = 'pending'
RETURNING 1"""

PROGRESS = """
SELECT count(*) AS ranges,
       count(*) FILTER (WHERE status = 'done') AS done,
       coalesce(sum(rows) FILTER (WHERE status = 'done'), 0) AS rows_done
FROM {t}_reindex_ranges WHERE job = $1"""

# Rows of one range still without the slot's vector; ``$2``–``$5`` bound the range
# (NULL: open), ``$6`` keeps only rows whose read slot ``{o}`` has a vector (the sweep).
MEMORY_ROWS = """
SELECT ns, key, version, content AS text FROM {t}
WHERE tenant = $1 AND {v} IS NULL
  AND ($2::text IS NULL OR (ns, key) >= ($2::text, $3::text))
  AND ($4::text IS NULL OR (ns, key) < ($4::text, $5::text))
  AND ($6::bool IS NOT TRUE OR {o} IS NOT NULL)
ORDER BY ns, key"""

TURN_ROWS = """
SELECT ns, event_id, position, text FROM {t}_turns
WHERE tenant = $1 AND {v} IS NULL
  AND ($2::text IS NULL OR (ns, event_id, position) >= ($2::text, $3::text, $7::int))
  AND ($4::text IS NULL OR (ns, event_id, position) < ($4::text, $5::text, $8::int))
  AND ($6::bool IS NOT TRUE OR {o} IS NOT NULL)
ORDER BY ns, event_id, position"""

# One statement per batch; a row rewritten since it was read (its version moved) was
# written with every slot by its writer and is left alone, as is one already done.
SET_MEMORY_VECTORS = """
UPDATE {t} AS m SET {v} = u.vec
FROM unnest($2::text[], $3::text[], $4::int[], $5::vector[]) AS u(ns, key, version, vec)
WHERE m.tenant = $1 AND m.ns = u.ns AND m.key = u.key AND m.version = u.version
  AND m.{v} IS NULL AND u.vec IS NOT NULL"""

SET_TURN_VECTORS = """
UPDATE {t}_turns AS m SET {v} = u.vec
FROM unnest($2::text[], $3::text[], $4::int[], $5::vector[]) AS u(ns, event_id, position, vec)
WHERE m.tenant = $1 AND m.ns = u.ns AND m.event_id = u.event_id AND m.position = u.position
  AND m.{v} IS NULL AND u.vec IS NOT NULL"""

# Rows whose read slot has a vector and the new slot none (the switch's check).
MISSING = """
SELECT (SELECT count(*) FROM {t} WHERE tenant = $1 AND {v} IS NULL AND {o} IS NOT NULL)
     + (SELECT count(*) FROM {t}_turns WHERE tenant = $1 AND {v} IS NULL AND {o} IS NOT NULL)"""

# -- namespaces' own graphs (``graphs``) ------------------------------------------------
# Every counted namespace of at least $1 rows, with its share of its table's counted
# rows and the slots its tenant's layout writes (its own row, else the all-tenants one):
# read as ``tulip_ops``, which sees every tenant.
GRAPH_CANDIDATES = """
WITH counted AS (
    SELECT 'memories' AS kind, tenant, ns, rows FROM {t}_ns_stats
    UNION ALL SELECT 'turns', tenant, ns, rows FROM {t}_turns_ns_stats
), totals AS (SELECT kind, sum(rows)::float8 AS total FROM counted GROUP BY kind)
SELECT c.kind, c.tenant, c.ns, c.rows, c.rows / greatest(t.total, 1) AS share,
       coalesce(l.write_slots, ARRAY['embedding']) AS slots
FROM counted c JOIN totals t USING (kind)
LEFT JOIN LATERAL (
    SELECT write_slots FROM {t}_layout
    WHERE scope = c.tenant OR scope = '' ORDER BY scope = '' LIMIT 1
) l ON true
WHERE c.rows >= $1
ORDER BY c.rows DESC, c.kind, c.tenant, c.ns"""

GRAPHS = "SELECT id, kind, tenant, ns, slot, rows, ready FROM {t}_graphs ORDER BY id"

# A graph's registry row (the owner's), kept or made; its id names the index.
CLAIM_GRAPH = """
INSERT INTO {t}_graphs (kind, tenant, ns, slot, rows) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (kind, tenant, ns, slot) DO UPDATE SET rows = EXCLUDED.rows
RETURNING id"""

GRAPH_READY = "UPDATE {t}_graphs SET ready = true WHERE id = $1"
GRAPH_RETIRED = "UPDATE {t}_graphs SET ready = false WHERE id = $1"
FORGET_GRAPH = "DELETE FROM {t}_graphs WHERE id = $1"

CREATE_GRAPH = "CREATE INDEX CONCURRENTLY IF NOT EXISTS {i} ON {t} {using} WHERE {key} = {value}"
CREATE_TURNS_GRAPH = CREATE_GRAPH.replace("ON {t} ", "ON {t}_turns ")
DROP_GRAPH = "DROP INDEX CONCURRENTLY IF EXISTS {i}"
# The planner's statistics of a table with new graphs: the dependency of the graphs'
# key on the namespace (migration 22) is what lets it read them.
ANALYZE_GRAPHED = "ANALYZE {t}"
ANALYZE_GRAPHED_TURNS = "ANALYZE {t}_turns"

# An index's validity and storage parameters (``m``, ``ef_construction`` of a graph).
INDEX_OPTIONS = """
SELECT i.indisvalid, c.reloptions FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indexrelid = to_regclass($1)"""

# Held by a graphs refresh for its session: refreshes of a table run one at a time.
GRAPHS_LOCK = "SELECT pg_try_advisory_lock(hashtext('{t}/graphs'))"

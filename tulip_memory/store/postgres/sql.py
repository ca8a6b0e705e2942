"""Every SQL statement of ``PgMemory`` in one place.

Statements are templates over ``{t}`` (the schema-qualified table, a validated
identifier) and ``{p}`` (its bare name, for index and policy names). Values always
travel as bind parameters. Vector ranking is written as ``(embedding <=> q) + 0``
on purpose: pgvector only uses the HNSW index for a bare ``embedding <=> q`` order,
and HNSW post-filtering would silently return too few rows of a small namespace
(pgvector 0.6 has no iterative scan). The exact scan over a namespace's rows, found
through the ``(tenant, ns, ...)`` B-tree, is what guarantees complete recall.
"""

from __future__ import annotations

COLS = "key, value, metadata, created_at, updated_at, version"

PIN_TENANT = "SELECT set_config('tulip.tenant', $1, true)"

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

APPLIED_VERSIONS = "SELECT version FROM {t}_migrations ORDER BY version"

RECORD_VERSION = "INSERT INTO {t}_migrations (version, name) VALUES ($1, $2)"

VECTOR_WIDTH = """
SELECT a.atttypmod FROM pg_attribute a
WHERE a.attrelid = $1::regclass AND a.attname = 'embedding' AND NOT a.attisdropped"""

UPSERT = """
INSERT INTO {t} AS m (tenant, ns, key, value, metadata, content, embedding)
SELECT $1, u.ns, u.key, u.value::jsonb, u.metadata::jsonb, u.content, u.embedding
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::vector[])
     AS u(ns, key, value, metadata, content, embedding)
ON CONFLICT (tenant, ns, key) DO UPDATE SET
    value = EXCLUDED.value,
    metadata = EXCLUDED.metadata,
    content = EXCLUDED.content,
    embedding = EXCLUDED.embedding,
    updated_at = clock_timestamp(),
    version = m.version + 1"""

# The pipeline's write: a row is only overwritten by an event at least as new as the
# one that wrote it, so redeliveries and replays of older events never roll it back.
UPSERT_FENCED = """
INSERT INTO {t} AS m (tenant, ns, key, value, metadata, content, embedding, source_seq)
SELECT $1, u.ns, u.key, u.value::jsonb, u.metadata::jsonb, u.content, u.embedding, $8::bigint
FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::vector[])
     AS u(ns, key, value, metadata, content, embedding)
ON CONFLICT (tenant, ns, key) DO UPDATE SET
    value = EXCLUDED.value,
    metadata = EXCLUDED.metadata,
    content = EXCLUDED.content,
    embedding = EXCLUDED.embedding,
    source_seq = EXCLUDED.source_seq,
    updated_at = clock_timestamp(),
    version = m.version + 1
WHERE m.source_seq IS NULL OR m.source_seq <= EXCLUDED.source_seq"""

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

GET_EMBEDDING = "SELECT embedding FROM {t} WHERE tenant = $1 AND ns = $2 AND key = $3"

DELETE = "DELETE FROM {t} WHERE tenant = $1 AND ns = $2 AND key = $3 RETURNING 1"

CLEAR = "DELETE FROM {t} WHERE tenant = $1 AND ns = $2"

LIST_KEYS = "SELECT key FROM {t} WHERE tenant = $1 AND ns = $2 ORDER BY key LIMIT $3"

LIST_NAMESPACES = """
SELECT DISTINCT ns FROM {t}
WHERE tenant = $1 AND (ns = $2 OR starts_with(ns, $2 || chr(31)))
ORDER BY ns LIMIT $3"""

# search_many: one LATERAL per namespace, each ranked exactly as `search` ranks it.
_MANY = """
SELECT n.idx, m.* FROM unnest($2::text[]) WITH ORDINALITY AS n(ns, idx)
CROSS JOIN LATERAL ({inner} LIMIT $3) m
ORDER BY n.idx, m._pos"""

_RECENT_INNER = f"""
SELECT {COLS}, row_number() OVER (ORDER BY updated_at DESC, key) AS _pos
FROM {{t}} WHERE tenant = $1 AND ns = n.ns ORDER BY updated_at DESC, key"""

_VECTOR_INNER = f"""
SELECT {COLS}, row_number() OVER (
    ORDER BY (embedding <=> $4) + 0 NULLS LAST, updated_at DESC, key) AS _pos
FROM {{t}} WHERE tenant = $1 AND ns = n.ns
ORDER BY (embedding <=> $4) + 0 NULLS LAST, updated_at DESC, key"""

_SUBSTRING_INNER = f"""
SELECT {COLS}, row_number() OVER (ORDER BY updated_at DESC, key) AS _pos
FROM {{t}} WHERE tenant = $1 AND ns = n.ns AND strpos(lower(content), lower($4)) > 0
ORDER BY updated_at DESC, key"""

SEARCH_RECENT = _MANY.format(inner=_RECENT_INNER)
SEARCH_VECTOR = _MANY.format(inner=_VECTOR_INNER)
SEARCH_SUBSTRING = _MANY.format(inner=_SUBSTRING_INNER)

# One ranking over the rows of several namespaces of a tenant (a recall across types).
SEARCH_ACROSS_VECTOR = f"""
SELECT ns, {COLS}, (embedding <=> $4) AS distance FROM {{t}}
WHERE tenant = $1 AND ns = ANY($2::text[])
ORDER BY (embedding <=> $4) + 0 NULLS LAST, updated_at DESC, key
LIMIT $3"""

SEARCH_ACROSS_RECENT = f"""
SELECT ns, {COLS}, NULL::float8 AS distance FROM {{t}}
WHERE tenant = $1 AND ns = ANY($2::text[])
ORDER BY updated_at DESC, key
LIMIT $3"""

# Turns of a session, once per event: a redelivered event adds nothing.
INSERT_TURNS = """
INSERT INTO {t}_turns (tenant, ns, thread_id, event_id, position, text, turn, metadata,
                       embedding, source_seq)
SELECT $1, $2, $3, $4, u.position, u.text, u.turn::jsonb, u.metadata::jsonb, u.embedding, $5
FROM unnest($6::int[], $7::text[], $8::text[], $9::text[], $10::vector[])
     AS u(position, text, turn, metadata, embedding)
ON CONFLICT DO NOTHING"""

# Exact ranking over the namespace's turns (see the module docstring on completeness).
SEARCH_TURNS = """
SELECT text, turn, metadata, position, 1 - (embedding <=> $3) AS score FROM {t}_turns
WHERE tenant = $1 AND ns = $2 AND embedding IS NOT NULL
  AND ($5::float8 IS NULL OR 1 - (embedding <=> $3) >= $5::float8)
ORDER BY (embedding <=> $3) + 0, created_at DESC, event_id, position
LIMIT $4"""

SEARCH_BY_EMBEDDING = f"""
SELECT {COLS}, (embedding <=> $3) AS distance FROM {{t}}
WHERE tenant = $1 AND ns = $2 AND embedding IS NOT NULL
  AND ($5::jsonb IS NULL OR metadata @> $5::jsonb)
  AND ($6::float8 IS NULL OR 1 - (embedding <=> $3) >= $6::float8)
ORDER BY (embedding <=> $3) + 0, updated_at DESC, key
LIMIT $4"""

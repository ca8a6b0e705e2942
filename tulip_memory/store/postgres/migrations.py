"""The ordered migration list of a ``PgMemory`` table, recorded in ``<table>_migrations``.

Each migration is a list of statement templates over ``{t}`` (qualified table),
``{p}`` (bare table name, for index and policy names) and ``{dim}`` (vector width).
Migrations run once each, in order, inside one transaction holding an advisory lock
on the table name, so concurrent first use by many processes applies them once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]
    needs_ann: bool = False


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
                metadata jsonb NOT NULL DEFAULT '{{}}'::jsonb,
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
        (
            "ALTER TABLE {t} ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE {t} FORCE ROW LEVEL SECURITY",
            """CREATE POLICY {p}_tenant ON {t}
                USING (tenant = current_setting('tulip.tenant', true))
                WITH CHECK (tenant = current_setting('tulip.tenant', true))""",
        ),
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
                metadata jsonb NOT NULL DEFAULT '{{}}'::jsonb,
                embedding vector({dim}),
                source_seq bigint,
                created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                PRIMARY KEY (tenant, ns, event_id, position)
            )""",
            "CREATE INDEX {p}_turns_ns ON {t}_turns (tenant, ns, created_at DESC)",
            "ALTER TABLE {t}_turns ENABLE ROW LEVEL SECURITY",
            "ALTER TABLE {t}_turns FORCE ROW LEVEL SECURITY",
            """CREATE POLICY {p}_turns_tenant ON {t}_turns
                USING (tenant = current_setting('tulip.tenant', true))
                WITH CHECK (tenant = current_setting('tulip.tenant', true))""",
        ),
    ),
)


def render(migration: Migration, *, table: str, name: str, dim: int, ann: bool) -> list[str]:
    """The statements of ``migration`` for one table; none when it needs an ANN index
    the table cannot have (vectors wider than pgvector's index limit)."""
    if migration.needs_ann and not ann:
        return []
    return [s.format(t=table, p=name, dim=dim) for s in migration.statements]

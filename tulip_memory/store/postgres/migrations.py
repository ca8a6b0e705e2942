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
)


def render(migration: Migration, *, table: str, name: str, dim: int, ann: bool) -> list[str]:
    """The statements of ``migration`` for one table; none when it needs an ANN index
    the table cannot have (vectors wider than pgvector's index limit)."""
    if migration.needs_ann and not ann:
        return []
    return [s.format(t=table, p=name, dim=dim) for s in migration.statements]

"""The Postgres + pgvector backend of the cross-thread store."""

from tulip_memory.store.postgres.admin import dsn_for_role, provision_app_role
from tulip_memory.store.postgres.store import PGVECTOR_ANN_MAX_DIM, PgMemory

__all__ = ["PGVECTOR_ANN_MAX_DIM", "PgMemory", "dsn_for_role", "provision_app_role"]

"""The fixed role names of a deployment (see :mod:`~tulip_memory.store.postgres.admin`).

Role names are cluster-wide in Postgres; these three are fixed because the migrations
name them. A leaf, so what checks the catalog (the audit) can name the owner without
importing what provisions the roles.
"""

from __future__ import annotations

#: Owns every table, sequence and index (NOLOGIN).
OWNER = "tulip_owner"
#: What the migrations grant DML to; the application role is a member (NOLOGIN).
DML = "tulip_dml"
#: What the admin tools run as (LOGIN, BYPASSRLS, NOINHERIT).
OPS = "tulip_ops"

"""Refuse to run an admin tool on tables the migrations do not account for.

An admin tool (``dlq``, an all-tenant ``reindex``) reads and writes every tenant's
rows. A trigger, rule or policy on one of its tables runs with the tool's rights, so
before it acts the tool checks each table: owned by the owner role, carrying exactly
the policies its migrations created (row-level security enabled and forced where they
forced it), no trigger but those its migrations created (the namespace counters of the
recall plan) calling a function the owner role owns, and no rule at all. Anything else
is refused in one line that says what was found and where.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tulip_memory.errors import TenantIsolationError
from tulip_memory.store.postgres.roles import OWNER

_POLICY = re.compile(r"CREATE\s+POLICY\s+(\w+)\s+ON\s+([\w.]+)", re.IGNORECASE)
_TRIGGER = re.compile(
    r"CREATE\s+TRIGGER\s+(\w+)\s+(?:BEFORE|AFTER|INSTEAD\s+OF)\s+\w+\s+ON\s+([\w.]+)",
    re.IGNORECASE,
)
_FORCED = re.compile(r"ALTER\s+TABLE\s+([\w.]+)\s+FORCE\s+ROW\s+LEVEL\s+SECURITY", re.IGNORECASE)

_TABLE = """
SELECT c.relowner::regrole::text AS owner, c.relrowsecurity AS rls,
       c.relforcerowsecurity AS forced
FROM pg_class c WHERE c.oid = to_regclass($1)"""
_TRIGGERS = """
SELECT t.tgname, p.proowner::regrole::text AS function_owner
FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
WHERE t.tgrelid = $1::regclass AND NOT t.tgisinternal"""
_RULES = "SELECT rulename FROM pg_rewrite WHERE ev_class = $1::regclass AND rulename <> '_RETURN'"
_POLICIES = "SELECT polname FROM pg_policy WHERE polrelid = $1::regclass"


class UnexpectedSchemaError(TenantIsolationError):
    """A table of the project carries what its migrations did not create."""


@dataclass
class Expected:
    """What the migrations leave on one table."""

    policies: set[str] = field(default_factory=set)
    triggers: set[str] = field(default_factory=set)
    forced: bool = False


def expected_objects(table: str, statements: Iterable[str]) -> dict[str, Expected]:
    """Per table, the policies and forced RLS that ``statements`` (the rendered
    migrations of ``table``) create; every table they create is listed, and
    ``table``'s migrations record."""
    out: dict[str, Expected] = {f"{table}_migrations": Expected()}
    for stmt in statements:
        for created in re.findall(r"CREATE\s+TABLE\s+([\w.]+)", stmt, re.IGNORECASE):
            out.setdefault(created, Expected())
        for policy, table in _POLICY.findall(stmt):
            out.setdefault(table, Expected()).policies.add(policy)
        for trigger, table in _TRIGGER.findall(stmt):
            out.setdefault(table, Expected()).triggers.add(trigger)
        for table in _FORCED.findall(stmt):
            out.setdefault(table, Expected()).forced = True
    return out


async def audit(conn: Any, expected: Mapping[str, Expected]) -> None:
    """Raise :class:`UnexpectedSchemaError` for the first table (that exists) owned
    by another role than the owner, or carrying a trigger, rule or policy its
    migrations did not create, or with its forced row-level security turned off."""
    for table, want in expected.items():
        row = await conn.fetchrow(_TABLE, table)
        if row is None:
            continue
        if row["owner"] != OWNER:
            _refuse(table, f"is owned by {row['owner']}, not {OWNER}", "run tulip-memory provision")
        for name, owner in [tuple(r) for r in await conn.fetch(_TRIGGERS, table)]:
            if name not in want.triggers or owner != OWNER:
                _refuse(table, f"carries trigger {name!r}", f"DROP TRIGGER {name} ON {table}")
        for name in [r[0] for r in await conn.fetch(_RULES, table)]:
            _refuse(table, f"carries rule {name!r}", f"DROP RULE {name} ON {table}")
        for name in sorted({r[0] for r in await conn.fetch(_POLICIES, table)} - want.policies):
            _refuse(table, f"carries policy {name!r}", f"DROP POLICY {name} ON {table}")
        if want.forced and not (row["rls"] and row["forced"]):
            _refuse(table, "has its forced row-level security turned off", "run provisioning")


def _refuse(table: str, found: str, fix: str) -> None:
    raise UnexpectedSchemaError(
        f"refusing to run: table {table} {found}, which its migrations do not account "
        f"for (review it, then: {fix})"
    )

"""API keys: tenant-bound credentials of the HTTP service, stored hashed.

A key reads ``tulip_<key id>.<tenant>.<secret>``: 16 hex digits naming the row, the
tenant in unpadded base64url, and 32 random bytes in base64url. Only the secret's
SHA-256 is stored (a random 256-bit secret needs no slow hash: nobody can guess it,
and its digest cannot be turned back into it); the key itself is printed once, when
it is made.

The table is the tenant's, under forced row-level security like the memories: the
service checks a key on a connection pinned to the tenant the key names, so a key
whose tenant part was rewritten finds no row. The application role (through
``tulip_dml``) may only read it; keys are made, listed and revoked by the operators
(``tulip_ops``, through ``tulip-memory keys`` and the administrator DSN), so whoever
holds the application DSN cannot mint a key for any tenant, its own included.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from tulip_memory.store.postgres.family import Family, FixedTable, Migration, tenant_rls
from tulip_memory.store.postgres.sql import PIN_TENANT
from tulip_memory.store.validation import validate_namespace

TABLE = "public.tulip_api_keys"
PREFIX = "tulip_"
Scope = Literal["read", "write", "all"]
SCOPES: tuple[Scope, ...] = ("read", "write", "all")
MAX_NAME_CHARS = 200
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_B64 = re.compile(r"[A-Za-z0-9_-]+")
_SECRET_CHARS = 43  # 32 bytes in unpadded base64url
#: The longest key accepted at all: a tenant of a few hundred bytes fits, a megabyte does not.
MAX_KEY_CHARS = 2048

#: Templates over ``{t}`` (the table) and ``{p}`` (its bare name).
KEYS = Family(
    "api keys",
    (
        Migration(
            1,
            "api keys of a tenant, hashed; the application reads, the operators make them",
            (
                """CREATE TABLE {t} (
                    key_id text PRIMARY KEY,
                    tenant text NOT NULL,
                    name text NOT NULL DEFAULT '',
                    scope text NOT NULL CHECK (scope IN ('read', 'write', 'all')),
                    secret_sha256 bytea NOT NULL,
                    created_at timestamptz NOT NULL DEFAULT now(),
                    revoked_at timestamptz
                )""",
                "CREATE INDEX {p}_tenant ON {t} (tenant, created_at)",
                *tenant_rls(),
                "GRANT SELECT ON {t} TO tulip_dml",
                "GRANT SELECT, INSERT, UPDATE ON {t} TO tulip_ops",
                "GRANT SELECT ON {t}_migrations TO tulip_dml, tulip_ops",
            ),
        ),
    ),
)

_INSERT = f"""
INSERT INTO {TABLE} (key_id, tenant, name, scope, secret_sha256) VALUES ($1, $2, $3, $4, $5)
RETURNING key_id, tenant, name, scope, created_at, revoked_at"""
_LIST = f"""
SELECT key_id, tenant, name, scope, created_at, revoked_at FROM {TABLE}
WHERE $1::text IS NULL OR tenant = $1 ORDER BY tenant, created_at, key_id"""
_REVOKE = f"""
UPDATE {TABLE} SET revoked_at = coalesce(revoked_at, now()) WHERE key_id = $1
RETURNING key_id, tenant, name, scope, created_at, revoked_at"""
_CHECK = f"""
SELECT key_id, tenant, name, scope, created_at, revoked_at FROM {TABLE}
WHERE key_id = $1 AND secret_sha256 = $2 AND revoked_at IS NULL"""


class MalformedKey(ValueError):
    """A string that is not an API key of this service (says why, never repeats it)."""


@dataclass(frozen=True)
class KeyInfo:
    """A key's row, never its secret."""

    key_id: str
    tenant: str
    name: str
    scope: Scope
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def from_row(cls, row: Any) -> KeyInfo:
        scope = next(s for s in SCOPES if s == row["scope"])
        return cls(
            row["key_id"], row["tenant"], row["name"], scope, row["created_at"], row["revoked_at"]
        )

    def describe(self) -> str:
        state = f"revoked {self.revoked_at:%Y-%m-%d %H:%M}" if self.revoked_at else "active"
        name = f" {self.name!r}" if self.name else ""
        return (
            f"{self.key_id}  tenant {self.tenant}  scope {self.scope}{name}  "
            f"created {self.created_at:%Y-%m-%d %H:%M}  {state}"
        )


@dataclass(frozen=True)
class ParsedKey:
    key_id: str
    tenant: str
    secret_sha256: bytes


_NAMES = {"p": TABLE.rpartition(".")[2]}


class ApiKeys(FixedTable):
    family, table, names = KEYS, TABLE, _NAMES


def check_scope(scope: str) -> Scope:
    for s in SCOPES:
        if s == scope:
            return s
    raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")


def new_key(tenant: str) -> tuple[str, ParsedKey]:
    """A fresh key of ``tenant``: the text to hand out once, and what is stored of it."""
    (tenant,) = validate_namespace((tenant,))
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    text = f"{PREFIX}{key_id}.{_b64(tenant.encode('utf-8'))}.{secret}"
    return text, ParsedKey(key_id, tenant, _digest(secret))


def parse_key(text: str) -> ParsedKey:
    """The parts of an API key, or :class:`MalformedKey`."""
    if not text.startswith(PREFIX) or len(text) > MAX_KEY_CHARS:
        raise MalformedKey(f"an API key starts with {PREFIX!r}")
    parts = text[len(PREFIX) :].split(".")
    if len(parts) != 3:
        raise MalformedKey("an API key has three dot-separated parts")
    key_id, tenant_b64, secret = parts
    if not _KEY_ID.fullmatch(key_id) or len(secret) != _SECRET_CHARS or not _B64.fullmatch(secret):
        raise MalformedKey("the key's id or secret is malformed")
    if not _B64.fullmatch(tenant_b64):
        raise MalformedKey("the key's tenant part is malformed")
    try:
        tenant = base64.urlsafe_b64decode(tenant_b64 + "=" * (-len(tenant_b64) % 4)).decode()
        validate_namespace((tenant,))
    except (binascii.Error, UnicodeDecodeError, TypeError, ValueError):
        raise MalformedKey("the key's tenant part is malformed") from None
    return ParsedKey(key_id, tenant, _digest(secret))


async def mint(conn: Any, tenant: str, scope: str, name: str = "") -> tuple[str, KeyInfo]:
    """Store a new key of ``tenant`` (``conn``: an operator's connection); its text,
    to print once, and its row."""
    checked = check_scope(scope)
    if len(name) > MAX_NAME_CHARS or "\x00" in name:
        raise ValueError(f"a key's name is at most {MAX_NAME_CHARS} characters, without NUL")
    text, parsed = new_key(tenant)
    row = await conn.fetchrow(
        _INSERT, parsed.key_id, parsed.tenant, name, checked, parsed.secret_sha256
    )
    return text, KeyInfo.from_row(row)


async def listed(conn: Any, tenant: str | None = None) -> list[KeyInfo]:
    """Every key (of ``tenant``), revoked ones too (``conn``: an operator's connection)."""
    return [KeyInfo.from_row(r) for r in await conn.fetch(_LIST, tenant)]


async def revoke(conn: Any, key_id: str) -> KeyInfo:
    """Revoke key ``key_id`` (idempotent); ``LookupError`` when there is none."""
    row = await conn.fetchrow(_REVOKE, key_id) if _KEY_ID.fullmatch(key_id) else None
    if row is None:
        raise LookupError(f"no API key {key_id!r}")
    return KeyInfo.from_row(row)


async def verify(conn: Any, key: ParsedKey) -> KeyInfo | None:
    """The row of ``key`` if it exists, is not revoked and its secret matches; read
    with ``conn`` (the application role's) pinned to the tenant the key names."""
    async with conn.transaction():
        await conn.execute(PIN_TENANT, key.tenant)
        row = await conn.fetchrow(_CHECK, key.key_id, key.secret_sha256)
    if row is None:
        return None
    info = KeyInfo.from_row(row)
    return info if info.tenant == key.tenant else None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("ascii")).digest()

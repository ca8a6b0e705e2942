"""Who is calling: a tenant-bound API key or JWT in ``Authorization: Bearer ...``.

The tenant of every request is the credential's, never the request's: routes take it
from the :class:`Principal` this module makes. An API key (:mod:`tulip_service.keys`)
is checked against Postgres, and the answer kept for ``TULIP_HTTP_KEY_CACHE_SECONDS``
(the longest a revoked key still works). A JWT is accepted when the service is given
an HS256 key (``TULIP_HTTP_JWT_KEY``) or a JWKS document (``TULIP_HTTP_JWKS_URL``) to
verify it with; it must carry ``exp``, the tenant claim
(``TULIP_HTTP_JWT_TENANT_CLAIM``) and a ``scope`` (space-separated: ``read``,
``write``, ``all``), and the issuer and audience when those are configured. Every
refusal is the same ``401`` whatever the reason (unknown, revoked, expired, badly
signed), so a caller learns nothing about keys it does not hold.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Literal

import jwt

from tulip_memory.store.validation import validate_namespace
from tulip_service import keys
from tulip_service.problems import INSUFFICIENT_SCOPE, UNAUTHORIZED, Problem
from tulip_service.settings import ServiceSettings

Need = Literal["read", "write"]
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="tulip-memory"'}
CACHE_ENTRIES = 10_000
ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA")
Connect = Callable[[], AbstractAsyncContextManager[Any]]


@dataclass(frozen=True)
class Principal:
    """The caller: its tenant, what it may do, and who it is (a key id or a JWT subject)."""

    tenant: str
    scope: keys.Scope
    subject: str

    def require(self, need: Need) -> None:
        if self.scope not in (need, "all"):
            raise Problem(INSUFFICIENT_SCOPE, f"this needs a credential of scope {need} or all")


def refused(detail: str) -> Problem:
    return Problem(UNAUTHORIZED, detail, headers=CHALLENGE)


class Authenticator:
    def __init__(self, settings: ServiceSettings, connect: Connect) -> None:
        self._connect = connect
        self._ttl = settings.key_cache_seconds
        self._cache: OrderedDict[bytes, tuple[float, Principal | None]] = OrderedDict()
        self._jwt = Tokens(settings) if settings.jwt_key or settings.jwks_url else None

    async def principal(self, authorization: str | None) -> Principal:
        if not authorization:
            raise refused("no credential: send Authorization: Bearer <API key or JWT>")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise refused("the Authorization header must be Bearer <API key or JWT>")
        if token.startswith(keys.PREFIX):
            found = await self._key(token)
        elif self._jwt is not None:
            found = await self._jwt.verify(token)
        else:
            raise refused("the credential is not an API key of this service")
        if found is None:
            raise refused("the credential is not valid")
        return found

    async def _key(self, token: str) -> Principal | None:
        try:
            parsed = keys.parse_key(token)
        except keys.MalformedKey as e:
            raise refused(f"malformed API key: {e}") from None
        digest = hashlib.sha256(token.encode()).digest()
        hit = self._cache.get(digest)
        now = time.monotonic()
        if hit is not None and hit[0] > now:
            return hit[1]
        async with self._connect() as conn:
            info = await keys.verify(conn, parsed)
        found = None if info is None else Principal(info.tenant, info.scope, info.key_id)
        if self._ttl > 0:
            self._cache[digest] = (now + self._ttl, found)
            self._cache.move_to_end(digest)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return found


class Tokens:
    """JWT verification with PyJWT: HS256 with the configured key, or an asymmetric
    algorithm with a key of the JWKS document (fetched and cached by PyJWT's client)."""

    def __init__(self, settings: ServiceSettings) -> None:
        self._secret = settings.jwt_key
        self._jwks = jwt.PyJWKClient(settings.jwks_url) if settings.jwks_url else None
        self._issuer = settings.jwt_issuer
        self._audience = settings.jwt_audience
        self._tenant = settings.jwt_tenant_claim

    async def verify(self, token: str) -> Principal | None:
        try:
            algorithm = jwt.get_unverified_header(token).get("alg")
            key: Any
            if algorithm == "HS256" and self._secret is not None:
                key = self._secret
            elif algorithm in ASYMMETRIC and self._jwks is not None:
                signing = await asyncio.to_thread(self._jwks.get_signing_key_from_jwt, token)
                key = signing.key
            else:
                return None
            claims = jwt.decode(
                token,
                key,
                algorithms=[str(algorithm)],
                issuer=self._issuer,
                audience=self._audience,
                options={
                    "require": ["exp", self._tenant, "scope"],
                    "verify_aud": self._audience is not None,
                },
            )
        except jwt.PyJWTError:
            return None
        return _principal(claims, self._tenant)


def _principal(claims: dict[str, Any], tenant_claim: str) -> Principal | None:
    tenant, scope = claims.get(tenant_claim), claims.get("scope")
    if not isinstance(scope, str) or not isinstance(tenant, str):
        return None
    try:
        validate_namespace((tenant,))
    except ValueError:
        return None
    granted = set(scope.split())
    if "all" in granted or {"read", "write"} <= granted:
        return Principal(tenant, "all", str(claims.get("sub", "jwt")))
    for one in ("read", "write"):
        if one in granted:
            return Principal(tenant, keys.check_scope(one), str(claims.get("sub", "jwt")))
    return None

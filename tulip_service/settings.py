"""The HTTP service's own settings, read from the environment once per process.

The service also reads the producer's and the reader's (``ProducerSettings``,
``ReaderSettings``): it publishes and reads exactly as an in-process chat backend
would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tulip_memory.env import Var, integer, positive, seconds, stripped, text_var
from tulip_memory.env import environ as environ_of

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


def _non_negative_seconds(raw: str) -> float:
    return 0.0 if raw.strip() == "0" else seconds(raw)


def _port(raw: str) -> int:
    value = integer(raw)
    if not 0 <= value <= 65535:
        raise ValueError("must be a port number, 0..65535")
    return value


#: The largest request body accepted (bytes); larger is ``413``.
MAX_BODY_BYTES = Var("TULIP_HTTP_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES, positive)
#: How long a checked API key is trusted without asking Postgres again: the longest a
#: revoked key still works (0: every request asks).
KEY_CACHE_SECONDS = Var("TULIP_HTTP_KEY_CACHE_SECONDS", 5.0, _non_negative_seconds)
#: JWTs signed with this HS256 key are accepted (unset: none are).
JWT_KEY = text_var("TULIP_HTTP_JWT_KEY", secret=True)
#: JWTs signed by a key of this JWKS document (RS256, ES256, EdDSA) are accepted.
JWKS_URL = text_var("TULIP_HTTP_JWKS_URL")
JWT_ISSUER = text_var("TULIP_HTTP_JWT_ISSUER")
JWT_AUDIENCE = text_var("TULIP_HTTP_JWT_AUDIENCE")
#: The claim naming the token's tenant.
JWT_TENANT_CLAIM = Var("TULIP_HTTP_JWT_TENANT_CLAIM", "tenant", stripped)
#: Seconds a stopping service lets requests in flight finish.
DRAIN_SECONDS = Var("TULIP_HTTP_DRAIN_SECONDS", 30.0, seconds)
#: Threads the service publishes through (each publish is a blocking broker round trip).
PUBLISH_THREADS = Var("TULIP_HTTP_PUBLISH_THREADS", 4, positive)
#: Where ``tulip-memory serve`` listens unless ``--port`` says otherwise.
PORT = Var("TULIP_HTTP_PORT", 8080, _port)


@dataclass(frozen=True, kw_only=True)
class ServiceSettings:
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    key_cache_seconds: float = KEY_CACHE_SECONDS.default
    jwt_key: str | None = field(default=None, repr=False)
    jwks_url: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_tenant_claim: str = JWT_TENANT_CLAIM.default
    drain_seconds: float = DRAIN_SECONDS.default
    publish_threads: int = PUBLISH_THREADS.default
    port: int = PORT.default

    def __post_init__(self) -> None:
        if self.jwt_key is not None and len(self.jwt_key.encode()) < 32:
            # RFC 7518 3.2: an HS256 key is at least as long as the hash (256 bits).
            raise ValueError("TULIP_HTTP_JWT_KEY must be at least 32 bytes (RFC 7518 3.2)")
        if not self.jwt_tenant_claim:
            raise ValueError("TULIP_HTTP_JWT_TENANT_CLAIM must name a claim")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServiceSettings:
        env = environ_of(environ)
        return cls(
            max_body_bytes=MAX_BODY_BYTES.read(env),
            key_cache_seconds=KEY_CACHE_SECONDS.read(env),
            jwt_key=JWT_KEY.read(env),
            jwks_url=JWKS_URL.read(env),
            jwt_issuer=JWT_ISSUER.read(env),
            jwt_audience=JWT_AUDIENCE.read(env),
            jwt_tenant_claim=JWT_TENANT_CLAIM.read(env),
            drain_seconds=DRAIN_SECONDS.read(env),
            publish_threads=PUBLISH_THREADS.read(env),
            port=PORT.read(env),
        )

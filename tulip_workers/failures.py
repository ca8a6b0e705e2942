"""Which failures wait for a dependency, and which are the event's own.

An ordered shard retries in place, so the question decides whether a shard may wait
forever. Only *a dependency is unreachable* earns that: a refused, reset or timed-out
connection or a host name that does not resolve (Postgres, Redis, S3, the model
server), Postgres refusing connections
while it starts or shuts down or is out of resources, S3 5xx and throttling, a model
server that is overloaded (429, 502, 503, 504). Everything else — an event that does
not decode, data Postgres will not store, a model that keeps answering garbage — is
the event's fault: it gets a bounded number of attempts and then becomes a dead
letter, so no message can stop its shard.

The cause chain is read (``raise ... from e``), so a wrapped error
(``ClaimCheckUnavailable``, ``ExtractionError``, ``DeltaStorageError``) is classified
by what it wraps. An :class:`~tulip_wire.events.EventError` is never transient.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import asyncpg
import redis

from tulip_memory.errors import ModelCallError
from tulip_wire.events import EventError

#: HTTP statuses of a model server or S3 that say "busy or away", not "bad request".
_BUSY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
_MODEL_BUSY_STATUSES = frozenset({408, 429, 502, 503, 504})
#: S3 error codes of throttling and of a service in trouble.
_S3_BUSY_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestTimeout",
        "RequestTimeoutException",
        "ServiceUnavailable",
        "InternalError",
    }
)
#: Connection-level errors of client libraries we do not import (httpx, openai,
#: litellm, aiohttp), by class name anywhere in their hierarchy.
_FOREIGN_UNREACHABLE = frozenset(
    {
        "APIConnectionError",
        "APITimeoutError",
        "ConnectError",
        "ConnectTimeout",
        "ReadTimeout",
        "PoolTimeout",
        "RemoteProtocolError",
        "ServerDisconnectedError",
        "ClientConnectionError",
        "ServiceUnavailableError",
        "RateLimitError",
    }
)
_UNREACHABLE_TYPES: tuple[type[BaseException], ...] = (
    ConnectionError,  # refused, reset, aborted, broken pipe
    socket.gaierror,  # a host name that does not resolve (yet)
    TimeoutError,  # socket and asyncio timeouts, an LLM slot not free in time
    redis.exceptions.ConnectionError,  # BusyLoadingError included
    redis.exceptions.TimeoutError,
    asyncpg.exceptions.PostgresConnectionError,  # class 08
    asyncpg.exceptions.OperatorInterventionError,  # 57P01 admin shutdown, 57P03 starting up
    asyncpg.exceptions.InsufficientResourcesError,  # 53: too many connections, disk full
)
_MAX_CHAIN = 16


def is_unreachable(error: BaseException) -> bool:
    """Whether ``error`` means a dependency cannot be reached right now (retry in
    place without limit), rather than something wrong with the event."""
    if isinstance(error, EventError):
        return False
    return any(_unreachable_link(link) for link in _chain(error))


def _unreachable_link(error: BaseException) -> bool:
    if isinstance(error, _UNREACHABLE_TYPES):
        return True
    if isinstance(error, FileNotFoundError) and error.filename is None:
        return True  # a unix socket that is not there (yet): its server is restarting
    if isinstance(error, asyncpg.exceptions.InterfaceError) and "connection" in str(error):
        return True  # "connection is closed", "connection was closed in the middle"
    if isinstance(error, ModelCallError):
        return error.status in _MODEL_BUSY_STATUSES
    if _s3_busy(error):
        return True
    return any(k.__name__ in _FOREIGN_UNREACHABLE for k in type(error).__mro__)


def _s3_busy(error: BaseException) -> bool:
    response = getattr(error, "response", None)
    if type(error).__name__ != "ClientError" or not isinstance(response, dict):
        return False
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = response.get("Error", {}).get("Code")
    return status in _BUSY_STATUSES or code in _S3_BUSY_CODES


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen and len(seen) < _MAX_CHAIN:
        seen.add(id(link))
        yield link
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)

"""Broker and Redis endpoints as production spells them, for kombu and for redis-py.

One URL per endpoint (12-factor), in the spellings kombu and redis-py document:

- ``redis://[user:pw@]host:port/db`` and ``unix:///path.sock?db=N`` (what ``dev`` writes);
- ``rediss://...`` for TLS, with redis-py's query parameters ``ssl_cert_reqs``
  (``required``/``optional``/``none``), ``ssl_ca_certs``, ``ssl_certfile``,
  ``ssl_keyfile``, ``ssl_check_hostname``. redis-py reads them from the URL; kombu wants
  them as ``Connection(ssl={...})`` (Celery's ``broker_use_ssl``) and refuses a
  ``rediss://`` URL without them, so :func:`broker_endpoint` moves them there;
- ``sentinel://[:pw@]host:port;sentinel://host:port/db?master_name=NAME`` for Redis
  Sentinel, kombu's spelling (sentinels separated by ``;``) plus ``master_name``, which
  kombu takes as a transport option and redis-py as ``Sentinel.master_for(NAME)``.
  Sentinel connections here are plain TCP.
- ``amqp://`` / ``amqps://`` / ``pyamqp://`` (RabbitMQ) for the broker only.

A Redis Cluster is not supported: the producer's sequence-number script, the pending
state's compare-and-delete and the redelivery script each touch several keys at once,
which a cluster allows only when those keys share a hash slot (``{hash tags}``).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import redis
from redis.sentinel import Sentinel

from tulip_memory.credentials import redact_url

SSL_PARAMS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
_CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}
REDIS_SCHEMES = frozenset({"redis", "rediss", "unix", "sentinel"})
BROKER_SCHEMES = REDIS_SCHEMES | {"redis+socket", "amqp", "amqps", "pyamqp"}


@dataclass(frozen=True)
class BrokerEndpoint:
    """What kombu (and so Celery) needs to reach a broker URL."""

    url: str
    use_ssl: dict[str, Any] | None = None
    transport_options: dict[str, Any] = field(default_factory=dict)


def scheme_of(url: str) -> str:
    return urlsplit(url.split(";", 1)[0]).scheme


def broker_endpoint(url: str) -> BrokerEndpoint:
    """``url`` as kombu spells it, with its TLS options and Sentinel master apart."""
    scheme = scheme_of(url)
    if scheme == "unix":
        return BrokerEndpoint(_socket_url(url))
    if scheme == "rediss":
        base, query = _split_query(url)
        options = {k: _ssl_value(k, query.pop(k)) for k in SSL_PARAMS if k in query}
        options.setdefault("ssl_cert_reqs", ssl.CERT_REQUIRED)
        return BrokerEndpoint(_join_query(base, query), use_ssl=options)
    if scheme == "sentinel":
        base, query = _split_query(url)
        master = _master_name(url, query)
        return BrokerEndpoint(_join_query(base, query), transport_options={"master_name": master})
    return BrokerEndpoint(url)


def kombu_url(url: str) -> str:
    """Just the URL of :func:`broker_endpoint` (for code that builds a kombu Connection
    from a plain Redis URL)."""
    return broker_endpoint(url).url


def redis_client(url: str, **kwargs: Any) -> redis.Redis:
    """A redis-py client for any Redis spelling above; ``kwargs`` go to every connection
    (timeouts, retry)."""
    if scheme_of(url) != "sentinel":
        return redis.Redis.from_url(url, **kwargs)
    base, query = _split_query(url)
    master = _master_name(url, query)
    nodes, db, password = _sentinel_nodes(base)
    timeouts = {k: v for k, v in kwargs.items() if k.startswith("socket_")}
    sentinel = Sentinel(nodes, sentinel_kwargs={**timeouts, "password": password}, **timeouts)
    client: redis.Redis = sentinel.master_for(master, db=db, password=password, **kwargs)
    return client


def _socket_url(url: str) -> str:
    """redis-py's ``unix://path?db=N`` as kombu spells it: ``redis+socket://path?virtual_host=N``."""
    parts = urlsplit(url)
    db = parse_qs(parts.query).get("db", [""])[0]
    return f"redis+socket://{parts.path}" + (f"?virtual_host={db}" if db else "")


def _split_query(url: str) -> tuple[str, dict[str, str]]:
    base, _, query = url.partition("?")
    return base, {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}


def _join_query(base: str, query: dict[str, str]) -> str:
    return f"{base}?{urlencode(query)}" if query else base


def _ssl_value(name: str, raw: str) -> Any:
    if name != "ssl_cert_reqs":
        return raw
    try:
        return _CERT_REQS[raw.lower().removeprefix("cert_")]
    except KeyError:
        raise ValueError(f"ssl_cert_reqs must be required, optional or none, got {raw!r}") from None


def _master_name(url: str, query: dict[str, str]) -> str:
    master = query.pop("master_name", "")
    if not master:
        raise ValueError(
            "a sentinel:// URL needs ?master_name=NAME (the monitored master), "
            f"got {redact_url(url)}"
        )
    return master


def _sentinel_nodes(base: str) -> tuple[list[tuple[str, int]], int, str | None]:
    """Hosts of ``sentinel://a:26379;sentinel://b:26379/db``, the db and the password."""
    nodes, db, password = [], 0, None
    for part in base.split(";"):
        parts = urlsplit(part)
        if parts.scheme != "sentinel" or not parts.hostname:
            raise ValueError(f"not a sentinel node: {redact_url(part)}")
        nodes.append((parts.hostname, parts.port or 26379))
        password = parts.password or password
        if parts.path.strip("/"):
            db = int(parts.path.strip("/"))
    return nodes, db, password

"""Worker settings read from the environment, checked when read."""

from __future__ import annotations

import os

from tulip_wire.endpoints import REDIS_SCHEMES, scheme_of


def positive_int(name: str, default: int) -> int:
    """``int(os.environ[name])`` (``default`` when unset); >= 1, or a ``ValueError``
    naming the variable."""
    raw = os.environ.get(name, str(default))
    try:
        value = int(raw)
    except ValueError as e:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from e
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def redis_url() -> str | None:
    """``TULIP_REDIS_URL``, else a Redis ``TULIP_BROKER_URL``, else ``None``."""
    url = os.environ.get("TULIP_REDIS_URL") or os.environ.get("TULIP_BROKER_URL", "")
    return url if scheme_of(url) in REDIS_SCHEMES else None

"""Connecting to Postgres: one place that turns "nobody answered" into an error naming
where (credentials stripped), instead of a bare ``ConnectionRefusedError`` or
``[Errno 2] No such file or directory``."""

from __future__ import annotations

from typing import Any

from tulip_memory.credentials import redact_url
from tulip_memory.errors import DatabaseUnreachable


async def connect(dsn: str, setting: str | None = None, **options: Any) -> Any:
    """``asyncpg.connect(dsn)``; :class:`DatabaseUnreachable` when nothing answers."""
    import asyncpg

    try:
        return await asyncpg.connect(dsn, **options)
    except OSError as e:
        raise DatabaseUnreachable(redact_url(dsn), e, setting) from e


async def create_pool(dsn: str, **options: Any) -> Any:
    """``asyncpg.create_pool(dsn)``; :class:`DatabaseUnreachable` when nothing answers."""
    import asyncpg

    try:
        return await asyncpg.create_pool(dsn, **options)
    except OSError as e:
        raise DatabaseUnreachable(redact_url(dsn), e) from e

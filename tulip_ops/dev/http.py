"""``tulip-memory serve`` as a process of the dev stack, on a loopback port, and an
API key of tenant ``demo`` for it (the previous run's is revoked first)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tulip_ops.dev.exporter import LoopbackCommand

DEMO_TENANT = "demo"
DEMO_KEY_NAME = "tulip-memory dev"


@dataclass
class HttpService(LoopbackCommand):
    command: ClassVar[str] = "serve"
    what: ClassVar[str] = "HTTP service"
    probe: ClassVar[str] = "/healthz"

    @property
    def url(self) -> str:
        return self.base


def demo_key(admin_dsn: str) -> str:
    """A fresh key of tenant ``demo`` (scope ``all``); the dev stack's earlier ones revoked."""
    from tulip_ops.dev.embedded import run_async

    async def go() -> str:
        import asyncpg

        from tulip_memory.store.postgres.admin import as_operator
        from tulip_service import keys

        conn = await asyncpg.connect(admin_dsn)
        try:
            await as_operator(conn)
            for old in await keys.listed(conn, DEMO_TENANT):
                if old.name == DEMO_KEY_NAME and old.revoked_at is None:
                    await keys.revoke(conn, old.key_id)
            text, _ = await keys.mint(conn, DEMO_TENANT, "all", DEMO_KEY_NAME)
            return text
        finally:
            await conn.close()

    key: str = run_async(go())
    return key

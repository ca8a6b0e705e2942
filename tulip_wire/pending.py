"""Read your writes: a thread's newest state waits in Redis until it is durable.

``Producer.checkpoint_saved`` puts the state here before publishing, so
``Reader.load`` returns it at once, before any worker ran. The checkpoint worker
removes it only after the checkpoint store has the state, and only if no newer
state replaced it meanwhile (compare-and-delete in one Lua script). A pending state
expires only after a generous TTL, and by then its event has long been written:
it is never the only copy of anything older than the newest save.

Keys are per (tenant, thread id): ``tulip:pending:<tenant>\\x1f<thread id>``
(:func:`~tulip_wire.events.thread_key`, injective: a tenant holds no ``\\x1f``), so
the same thread id in two tenants is two pending states.

Value layout: ``<checkpoint id: 32 hex>`` ``\\n`` ``<JSON of the state>``, so the
compare-and-delete never parses a state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tulip_wire.endpoints import redis_client
from tulip_wire.events import thread_key
from tulip_wire.topology import PENDING_KEY_PREFIX

_CAD = (Path(__file__).parent / "lua" / "pending_cad.lua").read_text()


@dataclass(frozen=True)
class PendingState:
    checkpoint_id: str
    state: dict[str, Any]


class PendingStates:
    """The overlay on one Redis client (``redis.Redis``)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._cad = client.register_script(_CAD)

    def put(
        self, tenant: str, thread_id: str, checkpoint_id: str, state: dict[str, Any], ttl: float
    ) -> None:
        text = json.dumps(state, ensure_ascii=False, allow_nan=False)
        self._client.set(_key(tenant, thread_id), f"{checkpoint_id}\n{text}", px=int(ttl * 1000))

    def get(self, tenant: str, thread_id: str) -> PendingState | None:
        raw = self._client.get(_key(tenant, thread_id))
        if raw is None:
            return None
        text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        checkpoint_id, _, body = text.partition("\n")
        return PendingState(checkpoint_id, json.loads(body))

    def clear_if(self, tenant: str, thread_id: str, checkpoint_id: str) -> bool:
        """Remove the pending state if it is still ``checkpoint_id``; True if removed."""
        return bool(self._cad(keys=[_key(tenant, thread_id)], args=[checkpoint_id]))


def _key(tenant: str, thread_id: str) -> str:
    return PENDING_KEY_PREFIX + thread_key(tenant, thread_id)


def pending_states(redis_url: str) -> PendingStates | None:
    """The overlay on ``redis_url``, or ``None`` when that is not a Redis URL."""
    if not redis_url.startswith(("redis://", "rediss://", "unix://")):
        return None

    return PendingStates(redis_client(redis_url))

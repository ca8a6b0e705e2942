"""Which event ids were handed to the broker: what lets ``Reader.status`` tell an event
still in flight (``pending``) from an id nobody published (``unknown``).

The producer sets ``tulip:published:<event id>`` (value: the event's ordering key) in
the same round trip (one script) as the key's sequence number, before the broker gets
the message; it expires after ``TULIP_STATUS_TTL`` (a day by default), long after a
healthy pipeline has written the event's ledger row, which is what ``status`` reads
first. So ``unknown`` means: never published through this Redis (a typo, another
environment, a forged id), still in a producer's local spool because Redis was down
when it was called, or published longer than the TTL ago and still not applied.
"""

from __future__ import annotations

from typing import Any

from tulip_wire.endpoints import REDIS_SCHEMES, redis_client, scheme_of

PUBLISHED_KEY_PREFIX = "tulip:published:"
DEFAULT_STATUS_TTL = 24 * 3600.0


class PublishedEvents:
    """The published-id markers on one Redis client (``redis.Redis``)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    @staticmethod
    def key(event_id: str) -> str:
        """The marker's Redis key."""
        return PUBLISHED_KEY_PREFIX + event_id

    def key_of(self, event_id: str) -> str | None:
        """The ordering key ``event_id`` was published under, or ``None``."""
        raw = self._client.get(PUBLISHED_KEY_PREFIX + event_id)
        if raw is None:
            return None
        return raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)


def published_events(redis_url: str) -> PublishedEvents | None:
    """The markers on ``redis_url``, or ``None`` when that is not a Redis URL."""
    if scheme_of(redis_url) not in REDIS_SCHEMES:
        return None
    return PublishedEvents(redis_client(redis_url))

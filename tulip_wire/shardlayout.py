"""The shard count producers route an ordered role by, held in Redis so that a
reshard switches every producer at the same moment.

``tulip:shards:<prefix>`` (e.g. ``tulip:shards:memory.extract``) holds ``"<n>"``: route
by ``n`` shards; or ``"drain <old> <new>"``: ``tulip-memory reshard`` is waiting for the
queues of the ``old`` layout to empty, and producers hold new events of the role in
their spool meanwhile (the request path does not wait; the spool delivers them after
the switch, in order). No key: route by the producer's own setting
(``TULIP_EXTRACT_SHARDS`` / ``TULIP_CHECKPOINT_SHARDS``).

A record that says neither (:class:`MalformedLayout`: anyone who can write to Redis
can write one) holds the role's events in the producers' spools too, since publishing by
a guess could break a key's order, until ``tulip-memory reshard --repair`` rewrites it.

A key changes shard only across a drain, so every event of one key that is still
queued or running sits on one queue, and a key's events stay in order: the old
layout's events are all applied before the first one of the new layout is published.
Producers read the record in the round trip that assigns the sequence number, so it
costs them nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from tulip_wire.topology import SHARDS_KEY_PREFIX


class Resharding(Exception):
    """A reshard of the role is draining its old layout: the event waits in the spool."""

    def __init__(self, prefix: str, old: int, new: int) -> None:
        self.prefix, self.old, self.new = prefix, old, new
        super().__init__(f"{prefix}: resharding from {old} to {new} shards, draining")


class MalformedLayout(ValueError):
    """A layout record that is neither a count nor a drain; ``key`` names it when known."""

    def __init__(self, record: str, key: str | None = None) -> None:
        self.record, self.key = record, key
        where = f" at {key}" if key else ""
        super().__init__(f"malformed shard layout record{where}: {record[:40]!r}")


def layout_key(prefix: str) -> str:
    return SHARDS_KEY_PREFIX + prefix


@dataclass(frozen=True)
class ShardLayout:
    """What the record of one role says: a shard count, or a drain from ``old`` to
    ``shards``; ``None`` when there is no record."""

    shards: int
    draining_from: int | None = None

    def encode(self) -> str:
        if self.draining_from is None:
            return str(self.shards)
        return f"drain {self.draining_from} {self.shards}"

    @classmethod
    def parse(cls, value: bytes | str | None, *, key: str | None = None) -> ShardLayout | None:
        """The record (read from ``key``); ``None`` for no record. A malformed record
        raises :class:`MalformedLayout` (publishing by a guess could break a key's order)."""
        if value is None:
            return None
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        words = text.split()
        try:
            if len(words) == 1:
                return cls(_count(words[0]))
            if len(words) == 3 and words[0] == "drain":
                return cls(_count(words[2]), _count(words[1]))
        except ValueError:
            pass
        raise MalformedLayout(text, key)

    def route(self, prefix: str) -> int:
        """The shard count to publish by now; :class:`Resharding` while draining."""
        if self.draining_from is not None:
            raise Resharding(prefix, self.draining_from, self.shards)
        return self.shards


def _count(word: str) -> int:
    n = int(word)
    if n < 1:
        raise ValueError(word)
    return n

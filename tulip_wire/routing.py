"""Shard routing: which ordered queue an event of a key goes to.

The hash must be the same in every process and every release: Python's ``hash()``
is salted per process, so two producers would disagree on a namespace's shard and
break per-key ordering. blake2b is stable and spreads keys evenly.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tulip_wire.topology import shard_queue, shard_queues


def stable_hash(key: str) -> int:
    """A 64-bit hash of ``key`` that never changes across processes or versions."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")


@dataclass(frozen=True)
class ShardRouter:
    """Maps a key to one of ``shards`` queues named ``<prefix>.<k>``."""

    prefix: str
    shards: int

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError(f"{self.prefix}: shards must be >= 1, got {self.shards}")

    def shard(self, key: str) -> int:
        return stable_hash(key) % self.shards

    def queue(self, key: str) -> str:
        return shard_queue(self.prefix, self.shard(key))

    def queues(self) -> list[str]:
        return shard_queues(self.prefix, self.shards)

"""A pool that claims shards: ``tulip-memory worker <role> --claim`` on as many hosts as wanted.

Each member (one ``tulip-memory worker --claim`` process) lists itself in
``tulip:members:<role>`` (a sorted set: member -> until when, renewed every second,
gone a lease length after the member stops renewing) and runs a shard worker for each
shard the *assignment* gives it. The assignment is a function of the live members alone,
so every member computes the same one: each shard goes to the member ranked highest for
it (rendezvous hashing: a member joining or leaving moves only the shards it takes or
held) among those below their quota (``⌈shards/members⌉`` for the first
``shards mod members`` by name, ``⌊shards/members⌋`` for the rest), so three members
over eight shards run three, three and two.

When the assignment changes, a member starts the workers of shards it gained (each a
standby until the shard's lease is free) and sends SIGTERM to those of shards it lost
(a graceful handover: tasks in hand finished, the lease released). Two members that
briefly disagree (one has not yet seen a join) both run a worker for a shard: the
shard's lease lets one consume (:mod:`tulip_workers.lease`). A member killed with its
host stops renewing: the others take its shards over once its membership and then its
workers' leases lapse; a member stopped cleanly leaves the set at once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from dataclasses import dataclass, field
from time import time
from typing import Any, Protocol

from tulip_ops.dev.supervisor import WorkerSpec, role_specs
from tulip_wire.topology import members_key

log = logging.getLogger(__name__)


def assign(shards: int, members: list[str]) -> dict[str, list[int]]:
    """Each member's shards: every shard to exactly one member, balanced, by rendezvous
    rank under each member's quota."""
    ordered = sorted(set(members))
    if not ordered:
        return {}
    base, extra = divmod(shards, len(ordered))
    room = {m: base + (1 if i < extra else 0) for i, m in enumerate(ordered)}
    mine: dict[str, list[int]] = {m: [] for m in ordered}
    for k in range(shards):
        ranked = sorted(ordered, key=lambda m: _rank(m, k), reverse=True)
        chosen = next(m for m in ranked if room[m] > 0)
        room[chosen] -= 1
        mine[chosen].append(k)
    return mine


def _rank(member: str, shard: int) -> bytes:
    return hashlib.blake2b(f"{member}\0{shard}".encode(), digest_size=8).digest()


class Workers(Protocol):
    """What a claim drives: start a worker, retire one (SIGTERM, not restarted)."""

    def add(self, spec: WorkerSpec) -> None: ...

    def retire(self, name: str) -> None: ...


@dataclass
class Claim:
    """One member of ``role``'s pool: its membership, and the shard workers it runs."""

    role: str
    shards: int
    client: Any  # redis.Redis
    ttl: float
    concurrency: int | None = None
    member: str = field(default_factory=lambda: f"{socket.gethostname()}/{os.getpid()}")
    running: dict[int, str] = field(default_factory=dict)  # shard -> worker name

    def __post_init__(self) -> None:
        self._specs = {
            k: spec
            for k, spec in enumerate(role_specs(self.role, self.shards, None, self.concurrency))
        }
        self._key = members_key(self.role)

    def tick(self, workers: Workers) -> list[int]:
        """Renew the membership, and run exactly this member's shards; returns them."""
        now = time()
        pipe = self.client.pipeline()
        pipe.zadd(self._key, {self.member: int((now + self.ttl) * 1000)})
        pipe.zremrangebyscore(self._key, "-inf", int(now * 1000))
        pipe.zrange(self._key, 0, -1)
        members = [_text(m) for m in pipe.execute()[2]]
        wanted = set(assign(self.shards, members).get(self.member, []))
        for k in sorted(set(self.running) - wanted):
            log.warning("%s: shard %d goes to another member; handing it over", self.member, k)
            workers.retire(self.running.pop(k))
        for k in sorted(wanted - set(self.running)):
            spec = self._specs[k]
            log.warning("%s: claims shard %d (%d members)", self.member, k, len(members))
            workers.add(spec)
            self.running[k] = spec.name
        return sorted(wanted)

    def leave(self) -> None:
        """Out of the pool at once (a clean stop): the others take the shards over."""
        self.client.zrem(self._key, self.member)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value

"""``tulip-memory reshard --extract N``: change a role's shard count on a running system.

A key's shard is ``hash(key) % shards``, so a new count moves most keys to another
queue; were events published to a key's new queue while older ones still waited on
its old one, two workers would run the key's events at once, out of order. So a
reshard drains (see :mod:`tulip_wire.shardlayout`):

1. the layout record in Redis says ``drain <old> <new>``: from their next publish,
   producers hold the role's new events in their spool (the request path does not
   wait);
2. after ``--grace`` seconds (longer than any publish already past its layout read
   takes), the command waits until the old layout's queues hold no message, queued or
   unacked (taken by a worker and not yet applied), twice ``--grace`` apart;
3. the record says ``<new>``: producers publish by the new count and their spools
   deliver what they held, in order.

Then start workers for the new shards and stop those past them (``TULIP_EXTRACT_SHARDS``
and ``TULIP_CHECKPOINT_SHARDS`` of every process should say the new count; the record
wins over a producer's setting). Not drained within ``--timeout`` (or interrupted),
the record goes back to the old count: nothing moved, nothing reordered. Redis brokers
only (the unacked messages are read from kombu's ``unacked`` hash).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import redis

from tulip_producer.producer import celery_app
from tulip_producer.settings import ProducerSettings
from tulip_wire.endpoints import redis_client
from tulip_wire.routing import ShardRouter
from tulip_wire.shardlayout import ShardLayout, layout_key
from tulip_wire.topology import CHECKPOINT_QUEUE_PREFIX, EXTRACT_QUEUE_PREFIX

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
POLL = 0.2


def add_parser(sub: Any) -> None:
    reshard = sub.add_parser(
        "reshard",
        help="change the shard count of the ordered queues without reordering a key",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    reshard.add_argument("--extract", type=_count, help="new shard count of memory.extract")
    reshard.add_argument("--checkpoint", type=_count, help="new shard count of memory.checkpoint")
    reshard.add_argument(
        "--grace", type=float, default=10.0, help="seconds a publish may take (default: 10)"
    )
    reshard.add_argument(
        "--timeout", type=float, default=3600.0, help="give up draining after (default: 3600)"
    )
    reshard.set_defaults(run=run)


def _count(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"a shard count is >= 1, got {n}")
    return n


def run(args: argparse.Namespace) -> int:
    wanted = [(EXTRACT_QUEUE_PREFIX, args.extract), (CHECKPOINT_QUEUE_PREFIX, args.checkpoint)]
    wanted = [(prefix, n) for prefix, n in wanted if n is not None]
    if not wanted:
        print("error: say --extract N and/or --checkpoint N", file=sys.stderr)
        return EXIT_USAGE
    settings = ProducerSettings.from_env()
    if settings.broker_is_amqp:
        print("error: reshard reads kombu's Redis keys; the broker is not Redis", file=sys.stderr)
        return EXIT_FAILED
    mine = {
        EXTRACT_QUEUE_PREFIX: settings.extract_shards,
        CHECKPOINT_QUEUE_PREFIX: settings.checkpoint_shards,
    }
    records = redis_client(settings.redis_url)
    app = celery_app(settings)
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        for prefix, new in wanted:
            drain = Drain(prefix, new, mine[prefix], records, channel, args.grace)
            if not drain.run(args.timeout, print):
                return EXIT_FAILED
    return EXIT_OK


class Drain:
    """One role's reshard: drain the old layout's queues, then switch."""

    def __init__(
        self,
        prefix: str,
        new: int,
        configured: int,
        records: redis.Redis,
        channel: Any,
        grace: float,
    ) -> None:
        self.prefix, self.new, self.grace = prefix, new, grace
        self.records, self.channel = records, channel
        self.key = layout_key(prefix)
        found = ShardLayout.parse(records.get(self.key))
        if found is None:
            self.old = configured
        elif found.draining_from is not None:  # an interrupted reshard: drain it again
            self.old = found.draining_from
        else:
            self.old = found.shards

    def run(self, timeout: float, say: Callable[[str], None]) -> bool:
        if self.old == self.new:
            self.records.set(self.key, ShardLayout(self.new).encode())
            say(f"{self.prefix}: already {self.new} shards")
            return True
        self.records.set(self.key, ShardLayout(self.new, self.old).encode())
        say(
            f"{self.prefix}: draining {self.old} shards; producers hold new events "
            "in their spool until the switch"
        )
        try:
            drained = self._wait_drained(time.monotonic() + timeout, say)
        except BaseException:
            self.records.set(self.key, ShardLayout(self.old).encode())
            raise
        if not drained:
            self.records.set(self.key, ShardLayout(self.old).encode())
            say(f"{self.prefix}: not drained in {timeout:g} s; left at {self.old} shards")
            return False
        self.records.set(self.key, ShardLayout(self.new).encode())
        queues = ShardRouter(self.prefix, self.new).queues()
        say(
            f"{self.prefix}: now {self.new} shards. Run workers for {queues[0]} .. "
            f"{queues[-1]} and set the role's shard count to {self.new} everywhere"
        )
        return True

    def _wait_drained(self, deadline: float, say: Callable[[str], None]) -> bool:
        time.sleep(self.grace)
        told = 0.0
        while time.monotonic() < deadline:
            left = self.waiting()
            if left == 0:
                time.sleep(self.grace)
                if self.waiting() == 0:
                    return True
                continue
            if time.monotonic() - told > 5:
                say(f"{self.prefix}: {left} message(s) left on the old shards")
                told = time.monotonic()
            time.sleep(POLL)
        return False

    def waiting(self) -> int:
        """Messages of the old layout's queues: queued, or taken and not yet acked."""
        queues = set(ShardRouter(self.prefix, self.old).queues())
        queued = sum(int(self.channel._size(q)) for q in queues)
        client = self.channel.client
        unacked = 0
        for raw in client.hvals(self.channel.unacked_key):
            try:
                _, _, routing_key = json.loads(raw)
            except (ValueError, TypeError):
                continue
            unacked += routing_key in queues
        return queued + unacked

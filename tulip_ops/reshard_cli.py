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

``--repair``: a record that says neither a count nor a drain (written by anyone with
access to Redis) holds every new event of its role in the producers' spools, which log
an error naming it. The repair waits, as a drain does, until no queue of the role holds
a message (of any shard count: whatever layout was in use, nothing of it is left
mid-drain), then rewrites the record as the configured shard count
(``TULIP_EXTRACT_SHARDS`` / ``TULIP_CHECKPOINT_SHARDS``, or ``--extract N`` /
``--checkpoint N``), if no one changed it meanwhile. A record that is fine is left as
it is; a drain left by an interrupted reshard is finished by running that reshard again.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis

from tulip_producer.producer import celery_app
from tulip_producer.settings import ProducerSettings
from tulip_wire.endpoints import redis_client
from tulip_wire.routing import ShardRouter
from tulip_wire.shardlayout import MalformedLayout, ShardLayout, layout_key
from tulip_wire.topology import CHECKPOINT_QUEUE_PREFIX, DELIVERING_PREFIX, EXTRACT_QUEUE_PREFIX

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
POLL = 0.2
#: Each ordered role's option.
ROLES = {EXTRACT_QUEUE_PREFIX: "extract", CHECKPOINT_QUEUE_PREFIX: "checkpoint"}


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
    reshard.add_argument(
        "--repair",
        action="store_true",
        help="rewrite a malformed layout record as the configured shard count, once no "
        "queue of its role holds a message",
    )
    reshard.set_defaults(run=run)


def _count(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"a shard count is >= 1, got {n}")
    return n


def run(args: argparse.Namespace) -> int:
    given = {EXTRACT_QUEUE_PREFIX: args.extract, CHECKPOINT_QUEUE_PREFIX: args.checkpoint}
    wanted = [(prefix, n) for prefix, n in given.items() if n is not None]
    if not wanted and not args.repair:
        print("error: say --extract N and/or --checkpoint N, or --repair", file=sys.stderr)
        return EXIT_USAGE
    settings = ProducerSettings.from_env()
    if settings.broker_is_amqp:
        print("error: reshard reads kombu's Redis keys; the broker is not Redis", file=sys.stderr)
        return EXIT_FAILED
    mine = {
        EXTRACT_QUEUE_PREFIX: settings.extract_shards,
        CHECKPOINT_QUEUE_PREFIX: settings.checkpoint_shards,
    }
    if args.repair and not wanted:
        wanted = list(mine.items())  # every role, to its configured count
    records = redis_client(settings.redis_url)
    app = celery_app(settings)
    repaired = True
    with app.connection_for_write() as connection:
        backlog = Backlog(connection.default_channel)
        for prefix, new in wanted:
            if args.repair:  # every role, whatever another's record says
                repair = Repair(prefix, new, records, backlog, args.grace)
                repaired = repair.run(args.timeout, print) and repaired
                continue
            try:
                drain = Drain(prefix, new, mine[prefix], records, backlog, args.grace)
            except MalformedLayout as e:
                print(f"error: {e}; run `tulip-memory reshard --repair` first", file=sys.stderr)
                return EXIT_FAILED
            if not drain.run(args.timeout, print):
                return EXIT_FAILED
    return EXIT_OK if repaired else EXIT_FAILED


class Backlog:
    """Messages of some shard queues, read from kombu's Redis keys: queued, taken by a
    worker and not yet acked (kombu's ``unacked`` hash), or between the two (a shard
    worker's delivering list, :mod:`tulip_workers.reliable_redis`)."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.client: redis.Redis = channel.client

    def of(self, queues: Iterable[str]) -> int:
        queues = set(queues)
        queued = sum(int(self.channel._size(q)) for q in queues)
        prefix = self.channel.global_keyprefix
        delivering = sum(int(self.client.llen(f"{prefix}{DELIVERING_PREFIX}{q}")) for q in queues)
        unacked = 0
        for raw in self.client.hvals(self.channel.unacked_key):
            try:
                _, _, routing_key = json.loads(raw)
            except (ValueError, TypeError):
                continue
            unacked += routing_key in queues
        return queued + delivering + unacked

    def role_queues(self, prefix: str) -> set[str]:
        """Every shard queue of a role that holds or held a message, whatever the shard
        count it was published by: the lists named ``<prefix>.<k>`` (or their delivering
        lists), and the queues of the role's unacked messages."""
        shard = re.compile(rf"{re.escape(prefix)}\.\d+")
        found: set[str] = set()
        keyprefix = self.channel.global_keyprefix
        for pattern in (f"{prefix}.*", f"{DELIVERING_PREFIX}{prefix}.*"):
            for raw in self.client.scan_iter(match=f"{keyprefix}{pattern}", count=1000):
                name = raw.decode() if isinstance(raw, bytes) else str(raw)
                name = name.removeprefix(keyprefix).removeprefix(DELIVERING_PREFIX)
                if shard.fullmatch(name):
                    found.add(name)
        for raw in self.client.hvals(self.channel.unacked_key):
            try:
                _, _, routing_key = json.loads(raw)
            except (ValueError, TypeError):
                continue
            if isinstance(routing_key, str) and shard.fullmatch(routing_key):
                found.add(routing_key)
        return found


def settled(
    left: Callable[[], int], grace: float, deadline: float, report: Callable[[int], None]
) -> bool:
    """Whether ``left()`` is 0 twice ``grace`` apart before ``deadline`` (after a first
    ``grace``: publishes already past their layout read land meanwhile); ``report`` is
    told what is left every 5 s."""
    time.sleep(grace)
    told = 0.0
    while time.monotonic() < deadline:
        n = left()
        if n == 0:
            time.sleep(grace)
            if left() == 0:
                return True
            continue
        if time.monotonic() - told > 5:
            report(n)
            told = time.monotonic()
        time.sleep(POLL)
    return False


def replace_record(records: redis.Redis, key: str, expected: bytes | str | None, new: str) -> bool:
    """Set ``key`` to ``new`` if it still holds ``expected``; False if someone changed it."""
    if isinstance(expected, str):
        expected = expected.encode()
    with records.pipeline() as pipe:
        try:
            pipe.watch(key)  # type: ignore[no-untyped-call]
            if pipe.get(key) != expected:
                return False
            pipe.multi()
            pipe.set(key, new)
            pipe.execute()
        except redis.WatchError:
            return False
    return True


class Drain:
    """One role's reshard: drain the old layout's queues, then switch."""

    def __init__(
        self,
        prefix: str,
        new: int,
        configured: int,
        records: redis.Redis,
        backlog: Backlog,
        grace: float,
    ) -> None:
        self.prefix, self.new, self.grace = prefix, new, grace
        self.records, self.backlog = records, backlog
        self.key = layout_key(prefix)
        found = ShardLayout.parse(records.get(self.key), key=self.key)
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
        draining = ShardLayout(self.new, self.old).encode()
        self.records.set(self.key, draining)
        say(
            f"{self.prefix}: draining {self.old} shards; producers hold new events "
            "in their spool until the switch"
        )
        try:
            drained = settled(
                self.waiting, self.grace, time.monotonic() + timeout,
                lambda n: say(f"{self.prefix}: {n} message(s) left on the old shards"),
            )  # fmt: skip
        except BaseException:
            self._back(draining)
            raise
        if not drained:
            self._back(draining)
            say(f"{self.prefix}: not drained in {timeout:g} s; left at {self.old} shards")
            return False
        if not replace_record(self.records, self.key, draining, str(self.new)):
            say(f"{self.prefix}: the layout record changed while draining; not switched")
            return False
        queues = ShardRouter(self.prefix, self.new).queues()
        say(
            f"{self.prefix}: now {self.new} shards. Run workers for {queues[0]} .. "
            f"{queues[-1]} and set the role's shard count to {self.new} everywhere"
        )
        return True

    def _back(self, draining: str) -> None:
        """The old count again, unless someone else rewrote the record meanwhile."""
        replace_record(self.records, self.key, draining, ShardLayout(self.old).encode())

    def waiting(self) -> int:
        """Messages of the old layout's queues, queued or being worked on."""
        return self.backlog.of(ShardRouter(self.prefix, self.old).queues())


class Repair:
    """One role's malformed layout record rewritten as ``shards`` (see the module doc)."""

    def __init__(
        self, prefix: str, shards: int, records: redis.Redis, backlog: Backlog, grace: float
    ) -> None:
        self.prefix, self.shards, self.grace = prefix, shards, grace
        self.records, self.backlog = records, backlog
        self.key = layout_key(prefix)

    def run(self, timeout: float, say: Callable[[str], None]) -> bool:
        record = self.records.get(self.key)
        try:
            layout = ShardLayout.parse(record, key=self.key)
        except MalformedLayout as e:
            say(f"{e}: repairing once no queue of {self.prefix} holds a message")
        else:
            return self._fine(layout, say)
        queues: set[str] = set()

        def left() -> int:
            queues.update(self.backlog.role_queues(self.prefix))
            return self.backlog.of(queues)

        def report(n: int) -> None:
            holding = sorted(q for q in queues if self.backlog.of([q]))
            say(f"{self.prefix}: {n} message(s) left on {', '.join(holding) or 'its queues'}")

        if not settled(left, self.grace, time.monotonic() + timeout, report):
            say(f"{self.prefix}: its queues did not empty in {timeout:g} s; record not repaired")
            return False
        if not replace_record(self.records, self.key, record, str(self.shards)):
            say(f"{self.prefix}: the layout record changed meanwhile; not repaired")
            return False
        say(f"{self.prefix}: repaired, {self.key} = {self.shards} shards")
        return True

    def _fine(self, layout: ShardLayout | None, say: Callable[[str], None]) -> bool:
        if layout is None or layout.draining_from is None:
            now = "no record" if layout is None else f"{layout.shards} shards"
            say(f"{self.prefix}: the layout record is fine ({now}); nothing to repair")
            return True
        say(
            f"{self.prefix}: a reshard from {layout.draining_from} to {layout.shards} shards "
            "is draining (or was interrupted): let it finish, or run `tulip-memory reshard "
            f"--{ROLES[self.prefix]} {layout.shards}` to finish it"
        )
        return False

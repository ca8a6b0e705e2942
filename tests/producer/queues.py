"""Reading what the producer published back from the broker, as a worker would get it."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kombu import Connection

from tulip_producer import ProducerSettings
from tulip_producer.producer import extract_queues
from tulip_wire.endpoints import kombu_url
from tulip_wire.events import Envelope, decode


@dataclass(frozen=True, kw_only=True)
class Delivered:
    """One Celery task message taken from a shard queue."""

    queue: str
    task: str
    task_id: str
    args: list[str]
    envelope: Envelope


def take_all(
    settings: ProducerSettings, mine: Callable[[Envelope], bool] = lambda env: True
) -> list[Delivered]:
    """The messages on the extract shard queues for which ``mine`` holds, in queue order.

    They are acked (taken); other messages go back to their queue untouched.
    """
    taken: list[Delivered] = []
    with Connection(kombu_url(settings.broker_url), connect_timeout=5) as conn:
        for queue in extract_queues(settings):
            simple = conn.SimpleQueue(queue)
            try:
                taken.extend(_drain(simple, queue.name, mine))
            finally:
                simple.close()
    return taken


def _drain(simple: Any, name: str, mine: Callable[[Envelope], bool]) -> list[Delivered]:
    out: list[Delivered] = []
    foreign: list[Any] = []  # held unacked until the end, so the loop never sees them twice
    while True:
        try:
            message = simple.get(block=False)
        except simple.Empty:
            break
        args, kwargs, _embed = message.payload
        envelope = decode(args[0])
        if not mine(envelope):
            foreign.append(message)
            continue
        assert kwargs == {}
        out.append(
            Delivered(
                queue=name,
                task=message.headers["task"],
                task_id=message.headers["id"],
                args=args,
                envelope=envelope,
            )
        )
        message.ack()
    for message in foreign:
        message.requeue()
    return out


def by_key(delivered: list[Delivered]) -> dict[str, list[Envelope]]:
    """The delivered envelopes of each key, in queue order."""
    out: dict[str, list[Envelope]] = {}
    for d in delivered:
        out.setdefault(d.envelope.key, []).append(d.envelope)
    return out


def with_db(url: str, db: int) -> str:
    """``url`` on Redis database ``db`` (``unix://`` takes it as a query parameter)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = re.sub(r"(^|&)db=\d+", "", parts.query).strip("&")
        query = f"{query}&db={db}" if query else f"db={db}"
        return f"unix://{parts.path}?{query}"  # urlunsplit would drop the empty netloc
    return urlunsplit(parts._replace(path=f"/{db}"))


def rising(seqs: list[int | None]) -> bool:
    """Sequence numbers, each above the one before (numbers come from Redis's clock:
    strictly increasing per key, with gaps)."""
    numbers = [s or 0 for s in seqs]
    return all(0 < a < b for a, b in itertools.pairwise(numbers)) and numbers[0] > 0

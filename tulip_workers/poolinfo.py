"""What a shard worker reports of its concurrency (``celery inspect stats``, Flower's
"Max concurrency"): C, the events it runs at once, not the size of its thread pool.

A shard worker is a ``threads`` pool of ``BUFFER_PER_SLOT`` x C threads (a key's
backlog holds threads but no slot: :mod:`tulip_workers.keyed`), so Celery would report
4 x C and an operator sizing by C would read 64 for C = 16. The pool's info keeps its
thread count as ``threads``."""

from __future__ import annotations

from typing import Any

from celery import Celery, signals

from tulip_wire.events import CHECKPOINT_SAVED, SESSION_ENDED
from tulip_wire.topology import CHECKPOINT_QUEUE_PREFIX, EXTRACT_QUEUE_PREFIX

_ROLE_OF_PREFIX = {EXTRACT_QUEUE_PREFIX: SESSION_ENDED, CHECKPOINT_QUEUE_PREFIX: CHECKPOINT_SAVED}


def ordered_event_type(queues: list[str]) -> str | None:
    """The event type a worker consuming ``queues`` runs in order, if it is a shard
    worker of one role."""
    types = {t for q in queues for p, t in _ROLE_OF_PREFIX.items() if q.startswith(p + ".")}
    return types.pop() if len(types) == 1 else None


def report_slots(pool: Any, slots: int) -> None:
    """Make ``pool``'s info say ``slots`` as its max concurrency (and its threads)."""
    original = pool._get_info

    def info() -> dict[str, Any]:
        found = dict(original())
        found["threads"] = found.get("max-concurrency")
        found["max-concurrency"] = slots
        return found

    pool._get_info = info


def install(app: Celery) -> None:
    def on_ready(sender: Any = None, **_: Any) -> None:
        worker = getattr(sender, "controller", None)
        threads = getattr(getattr(worker, "pool_cls", None), "__module__", "")
        if sender.app is not app or threads != "celery.concurrency.thread":
            return
        queues = list(app.amqp.queues.consume_from)
        event_type = ordered_event_type(queues)
        pool = getattr(worker, "pool", None)
        if event_type is None or pool is None or not hasattr(pool, "_get_info"):
            return
        from tulip_workers.runtime import runtime

        report_slots(pool, runtime().settings.concurrency[event_type])

    signals.worker_ready.connect(on_ready, weak=False, dispatch_uid=f"tulip-poolinfo-{id(app)}")

"""A shard worker reports C as its max concurrency (Flower's "Max concurrency"), and
its thread count apart."""

from __future__ import annotations

from typing import Any

from celery.concurrency.thread import TaskPool

from tulip_wire.events import CHECKPOINT_SAVED, SESSION_ENDED
from tulip_workers.poolinfo import ordered_event_type, report_slots


def test_a_threads_pool_of_four_c_reports_c() -> None:
    pool = TaskPool(limit=64)
    pool.start()
    try:
        report_slots(pool, 16)
        info: dict[str, Any] = pool.info
        assert info["max-concurrency"] == 16 and info["threads"] == 64
    finally:
        pool.stop()


def test_the_role_is_read_from_the_queues_consumed() -> None:
    assert ordered_event_type(["memory.extract.0", "memory.extract.3"]) == SESSION_ENDED
    assert ordered_event_type(["memory.checkpoint.1"]) == CHECKPOINT_SAVED
    assert ordered_event_type(["memory.summarize"]) is None
    assert ordered_event_type(["memory.extract.0", "memory.checkpoint.0"]) is None

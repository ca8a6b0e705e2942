"""A Celery app for redelivery tests: one task that records its argument in Redis.

Configured from ``tulip_wire.celeryconfig`` (acks_late, prefetch 1, two-hour visibility timeout)
with the broker from ``TULIP_BROKER_URL``. ``TULIP_TEST_KEYPREFIX`` gives kombu's keys
a prefix of the test's own; ``TULIP_TEST_REDELIVERY=1`` installs the fix under test.
The task writes ``start:<n>`` and ``done:<n>`` to the list ``TULIP_TEST_LOG_KEY`` on
``TULIP_TEST_LOG_URL``; with ``hold`` it sleeps in between, but only on its first run,
so a test can SIGKILL the worker inside it and watch the redelivered run finish.
"""

from __future__ import annotations

import os
import time
from functools import cache

import redis
from celery import Celery

from tulip_wire import celeryconfig
from tulip_workers.redelivery import install

TASK_NAME = "tests.record"

app = Celery("tulip_redelivery_test")
app.config_from_object("tulip_wire.celeryconfig")
app.conf.broker_url = os.environ.get("TULIP_BROKER_URL", celeryconfig.broker_url)
app.conf.broker_transport_options = {
    **celeryconfig.broker_transport_options,
    "global_keyprefix": os.environ.get("TULIP_TEST_KEYPREFIX", ""),
}
if os.environ.get("TULIP_TEST_REDELIVERY") == "1":
    install(app)


@cache
def _log() -> redis.Redis:
    return redis.Redis.from_url(os.environ["TULIP_TEST_LOG_URL"])


@app.task(name=TASK_NAME)  # type: ignore[untyped-decorator]
def record(value: int, hold: float = 0.0) -> None:
    log, key = _log(), os.environ["TULIP_TEST_LOG_KEY"]
    log.rpush(key, f"start:{value}")
    if hold and log.set(f"{key}:held:{value}", 1, nx=True):
        time.sleep(hold)
    log.rpush(key, f"done:{value}")

"""The task message the producer writes straight into Redis (``tulip_producer.direct``:
what Celery's ``send_task`` would store, built once and filled per event) is one a real
Celery worker takes as Celery's own: it reaches the task by its name, on the event's
shard queue, with the event as its one argument and the event id as its task id.

The app is ``pytest-celery``'s in-process ``celery_app`` fixture, configured as
``tulip_wire.celeryconfig`` configures ours; its worker is Celery's in-process test
worker (``celery.contrib.testing.worker.start_worker``, what Celery's own
``celery_worker`` fixture runs: pytest-celery 1.x gives that name to a worker in a
Docker container, which this suite does not use)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker

from tests.producer.conftest import SHARDS, MakeProducer
from tulip_wire import celeryconfig
from tulip_wire.endpoints import kombu_url
from tulip_wire.events import SESSION_ENDED, TASKS, decode, namespace_key
from tulip_wire.routing import ShardRouter
from tulip_wire.topology import EXTRACT_QUEUE_PREFIX

QUEUES = ShardRouter(EXTRACT_QUEUE_PREFIX, SHARDS).queues()


@pytest.fixture
def celery_config(broker_url: str) -> Mapping[str, Any]:
    return {
        "broker_url": kombu_url(broker_url),
        "result_backend": "cache+memory://",
        "task_queues": [celeryconfig.kombu_queue(q, ordered=True, amqp=False) for q in QUEUES],
        "broker_transport_options": {"priority_steps": [0]},
        "task_serializer": celeryconfig.task_serializer,
        "accept_content": celeryconfig.accept_content,
        "task_acks_late": True,
    }


Received = list[tuple[tuple[Any, ...], dict[str, Any], str, str | None]]


@pytest.fixture
def received(celery_app: Any) -> Iterator[Received]:
    """What the extract task of ``celery_app`` was called with, by an in-process worker
    consuming the shard queues."""
    if "tulip_workers.app" in sys.modules:  # fenced consume, patched kombu: not Celery's own
        pytest.skip(
            "an earlier test in this process loaded tulip_workers.app, whose process-wide "
            "broker patches a plain Celery worker does not run under"
        )
    calls: Received = []

    @celery_app.task(name=TASKS[SESSION_ENDED], bind=True)  # type: ignore[untyped-decorator]
    def extract(self: Any, *args: Any, **kwargs: Any) -> str:
        info = self.request.delivery_info or {}
        calls.append((args, kwargs, self.request.id, info.get("routing_key")))
        return "applied"

    with start_worker(celery_app, pool="solo", queues=QUEUES, perform_ping_check=False):
        yield calls


def test_a_published_session_reaches_the_extract_task_as_celery_sends_it(
    received: Received, broker_url: str, make_producer: MakeProducer
) -> None:
    producer = make_producer(broker_url)
    assert producer._publisher._direct is not None  # the hand-built message is under test
    namespace = ("acme", "users", "contract")
    event_id = producer.session_ended(namespace, "t", [{"role": "user", "content": "hi"}])
    deadline = time.monotonic() + 30
    while not received and time.monotonic() < deadline:
        time.sleep(0.05)
    assert received, "the worker never ran the task"
    [(args, kwargs, task_id, queue)] = received
    assert kwargs == {} and len(args) == 1 and task_id == event_id
    env = decode(args[0])
    assert env.id == event_id and env.key == namespace_key(namespace) and env.seq
    assert queue == ShardRouter(EXTRACT_QUEUE_PREFIX, SHARDS).queue(env.key)

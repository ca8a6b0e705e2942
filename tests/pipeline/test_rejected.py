"""Messages Celery refuses before any task body runs are dead letters (real worker).

A broker client can put anything on a shard queue: a task name no worker has, a
content type the workers do not accept (pickle), bytes that are not JSON, JSON that
is not a task's ``[args, kwargs, embed]``, a compression no worker has, or (on Redis)
an item that is no kombu message at all. Celery drops each of those itself (a log
line, then an ack or a reject; kombu stops the worker on the last); here every one
must become a dead letter with its reason and the bytes that arrived, listed by
``tulip-memory dlq list``, while the shard goes on with the normal events behind
them, in order. (A bogus content encoding on JSON is no case of its own: kombu
decodes JSON as UTF-8 whatever it says.)
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
import uuid
from typing import Any

import redis
from kombu import Connection

from tests.pipeline.conftest import SHARDS, Pipeline
from tests.pipeline.test_faults import session, shard_of
from tests.support.pg import dead_raw
from tulip_ops.dev.embedded import run_async
from tulip_producer import Producer
from tulip_wire.endpoints import kombu_url
from tulip_wire.events import SESSION_ENDED, TASKS
from tulip_wire.routing import ShardRouter
from tulip_workers.deadletters import UNKNOWN_TENANT

TASK = TASKS[SESSION_ENDED]
JSON = "application/json"


def rejected_messages() -> dict[str, tuple[str, bytes, str, str]]:
    """By kind: (task name, body bytes, content type, the reason's class)."""
    triple = json.dumps([["not an event"], {}, {}]).encode()
    return {
        "unknown task": ("memory.no_such_task", triple, JSON, "NotRegistered"),
        "pickle": (TASK, pickle.dumps(([], {}, {})), "application/x-python-serialize", "Content"),
        "unknown content type": (TASK, triple, "application/x-tulip-nope", "Content"),
        "not JSON": (TASK, b'{"v": 1, "id": ', JSON, "DecodeError"),
        "not UTF-8": (TASK, b'["\xff\xfe"]', JSON, "DecodeError"),
        "not a task's triple": (TASK, b'"just a string"', JSON, "InvalidTaskError"),
        "no task id": (TASK, json.dumps([[uuid.uuid4().hex], {}, {}]).encode(), JSON, "task id"),
        "unknown compression": (TASK, triple, JSON, "x-tulip-squash"),
    }


def publish_raw(broker_url: str, queue: str, messages: dict[str, Any]) -> dict[str, str]:
    """Each message straight onto ``queue``, as any broker client can; by kind, the
    id its dead letter is filed under (a digest of the body when it has no task id)."""
    ids = {}
    with Connection(kombu_url(broker_url)) as connection:
        producer = connection.Producer()
        for kind, (name, body, content_type, _) in messages.items():
            ids[kind] = uuid.uuid4().hex
            headers = {"lang": "py", "task": name, "id": ids[kind], "root_id": ids[kind]}
            if kind == "no task id":
                del headers["id"]
                ids[kind] = hashlib.sha256(body).hexdigest()[:32]
            if kind == "unknown compression":
                headers["compression"] = "application/x-tulip-squash"
            producer.publish(
                body,
                exchange="",
                routing_key=queue,
                content_type=content_type,
                content_encoding="binary" if "pickle" in content_type else "utf-8",
                headers=headers,
                serializer=None,
            )
    return ids


def dlq_list(pipeline: Pipeline) -> str:
    listed = subprocess.run(
        [sys.executable, "-m", "tulip_ops.cli", "dlq", "list", "--limit", "1000"],
        env={**os.environ, "TULIP_DATABASE_ADMIN_URL": pipeline.admin_url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    return listed.stdout


def test_messages_celery_refuses_are_dead_letters_and_the_shard_goes_on(
    pipeline: Pipeline,
) -> None:
    refusals_are_dead_letters(pipeline, pipeline.broker_url)


def refusals_are_dead_letters(pipeline: Pipeline, broker_url: str) -> None:
    """Each refused message on a real shard worker of ``broker_url`` (sequences and
    pending states in the pipeline's Redis) between normal events: each a dead letter
    with its reason and bytes, every event applied in order."""
    ns = ("acme", "users", "after-rejects")
    k = shard_of(ns)
    queue = ShardRouter("memory.extract", 2).queues()[k]
    pipeline.start_shard(k, TULIP_BROKER_URL=broker_url)
    messages = rejected_messages()
    producer = Producer.from_urls(
        broker_url, pipeline.broker_url, spool_dir=pipeline.spool, extract_shards=SHARDS
    )
    with producer:
        first = producer.session_ended(ns, "t", session(0, "grey"))
        assert producer.flush(timeout=30)
        rejected = publish_raw(broker_url, queue, messages)
        colours = ["red", "green", "blue", "amber"]
        ids = [producer.session_ended(ns, "t", session(i, c)) for i, c in enumerate(colours, 1)]
        assert producer.flush(timeout=30)
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, list(rejected.values()), UNKNOWN_TENANT, timeout=90)
        pipeline.wait_applied(reader, [first, *ids], "acme", timeout=90)
        for kind, task_id in rejected.items():
            status = reader.status(task_id, tenant=UNKNOWN_TENANT)
            assert status.state == "dead", (kind, status)
        states = [reader.status(e, tenant="acme").state for e in [first, *ids]]
        assert states == ["applied"] * 5
        found = {m.key: m.content for m in reader.recall(ns, None)}
    assert "amber" in found["favourite-colour"]  # the last one, applied after the others
    reasons = dead_reasons(dlq_list(pipeline))
    for kind, task_id in rejected.items():
        reason = reasons.get(task_id, "")
        assert messages[kind][3] in reason and "before any task ran" in reason, (kind, reason)
        assert run_async(dead_raw(pipeline.admin_url, task_id)) == messages[kind][1], kind


def dead_reasons(listing: str) -> dict[str, str]:
    """``dlq list`` output (a line per letter, its reason indented below) by event id."""
    reasons: dict[str, str] = {}
    event_id = ""
    for line in listing.splitlines():
        if line and not line[0].isspace():
            event_id = line.split()[0]
        elif event_id:
            reasons[event_id] = line.strip()
    return reasons


def not_kombu_messages() -> dict[str, bytes]:
    """By kind: items a Redis client can push onto a shard queue that are no kombu
    message at all, so Celery never sees them."""
    return {
        "not JSON": b"\x00\xffnot json at all",
        "JSON, no envelope": b'{"body": "eA=="}',
        "not an object": b"[1, 2, 3]",
    }


def test_items_that_are_not_kombu_messages_are_dead_letters_and_the_shard_goes_on(
    pipeline: Pipeline,
) -> None:
    ns = ("acme", "users", "after-raw-items")
    k = shard_of(ns)
    queue = ShardRouter("memory.extract", 2).queues()[k]
    pipeline.start_shard(k)
    items = not_kombu_messages()
    broker = redis.Redis.from_url(pipeline.broker_url)
    with pipeline.producer() as producer:
        first = producer.session_ended(ns, "t", session(0, "grey"))
        assert producer.flush(timeout=30)
        for item in items.values():
            broker.lpush(queue, item)
        colours = ["red", "green", "blue"]
        ids = [producer.session_ended(ns, "t", session(i, c)) for i, c in enumerate(colours, 1)]
        assert producer.flush(timeout=30)
    digests = {kind: hashlib.sha256(item).hexdigest()[:32] for kind, item in items.items()}
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, [first, *ids], "acme", timeout=90)
        pipeline.wait_applied(reader, list(digests.values()), UNKNOWN_TENANT, timeout=30)
        states = [reader.status(e, tenant="acme").state for e in [first, *ids]]
        found = {m.key: m.content for m in reader.recall(ns, None)}
    assert states == ["applied"] * 4
    assert "blue" in found["favourite-colour"]
    reasons = dead_reasons(dlq_list(pipeline))
    for kind, event_id in digests.items():
        assert "not a kombu message" in reasons.get(event_id, ""), (kind, reasons)
    for kind, item in items.items():
        assert run_async(dead_raw(pipeline.admin_url, digests[kind])) == item, kind
    worker = pipeline.workers.started[-1].proc
    assert worker is not None and worker.poll() is None  # the worker never stopped

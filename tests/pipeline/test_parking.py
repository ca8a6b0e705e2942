"""Per-key parking: a key's backlog waits in order outside a shard worker's reservation,
so other keys flow whatever its size, and no SIGKILL at any point of the moves loses or
reorders a message (:mod:`tulip_workers.parking`).

Real ``celery worker`` processes in the ``threads`` layout of ``tulip-memory worker``,
a model server that answers slowly, the broker's Redis as the tests' own.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from tests.pipeline.conftest import Pipeline
from tests.pipeline.test_concurrency import (
    RecordingModel,
    first_asks,
    model_env,
    said,
    start_shard,
    users_on,
)
from tests.support.openai_server import FakeOpenAI
from tulip_wire.events import namespace_key
from tulip_wire.topology import parked_index_key, parked_key, unparking_key
from tulip_workers.keyed import BUFFER_PER_SLOT
from tulip_workers.reliable_redis import delivering_key

QUEUE = "memory.extract.0"
C = 2


def test_other_keys_flow_while_one_key_has_ten_times_the_reservation_queued(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    hot, *others = users_on(0, 13, "h")
    backlog = 10 * BUFFER_PER_SLOT * C  # ten times what the worker reserves
    model = RecordingModel(delay=0.0, slow_user=hot, slow_delay=0.1)
    fake_openai.default_chat = model
    start_shard(pipeline, 0, C, **model_env(fake_openai))
    client = redis.Redis.from_url(pipeline.broker_url)
    with pipeline.producer() as producer:
        hot_ids = [
            producer.session_ended(("acme", "users", hot), "t-hot", said(hot, n))
            for n in range(1, backlog + 1)
        ]  # queued first: 8 s of model time, one at a time
        other_ids = [
            producer.session_ended(("acme", "users", u), f"t-{u}", said(u, 1)) for u in others
        ]
        assert producer.flush(timeout=30)
    parked_seen = 0
    with pipeline.reader() as reader:
        deadline = time.monotonic() + 120
        while any(reader.status(e, tenant="acme").state != "applied" for e in other_ids):
            parked_seen = max(parked_seen, client.llen(parked_key(QUEUE, _key(hot))))
            assert time.monotonic() < deadline, "the other namespaces never ran"
            time.sleep(0.05)
        still_pending = [e for e in hot_ids if reader.status(e, tenant="acme").state == "pending"]
        assert len(still_pending) > backlog // 2, "the others waited for the hot backlog"
        assert parked_seen > 0
        pipeline.wait_applied(reader, hot_ids, "acme", timeout=120)
    assert model.asked[hot] == list(range(1, backlog + 1))  # in order, each once
    assert client.hlen(parked_index_key(QUEUE)) == 0 and client.hlen(unparking_key(QUEUE)) == 0


def test_a_hot_key_parked_through_sigkills_loses_and_reorders_nothing(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    hot, *others = users_on(0, 7, "k")
    model = RecordingModel(delay=0.02, slow_user=hot, slow_delay=0.05)
    fake_openai.default_chat = model
    env = model_env(fake_openai)
    worker = start_shard(pipeline, 0, C, **env)
    ids: list[str] = []
    with pipeline.producer() as producer:
        for n in range(1, 41):
            ids.append(producer.session_ended(("acme", "users", hot), "t-hot", said(hot, n)))
            if n % 5 == 0:
                ids += [
                    producer.session_ended(("acme", "users", u), f"t-{u}", said(u, n // 5))
                    for u in others
                ]
        assert producer.flush(timeout=30)
    for cut in (4, 14, 26):  # each kill with most of the hot backlog parked
        deadline = time.monotonic() + 60
        while len(model.asked[hot]) < cut and time.monotonic() < deadline:
            time.sleep(0.005)
        worker.kill()
        worker = start_shard(pipeline, 0, C, **env)
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, ids, "acme", timeout=180)
        assert {reader.status(e, tenant="acme").state for e in ids} == {"applied"}
    assert first_asks(model.asked[hot]) == list(range(1, 41))
    for user in others:
        assert first_asks(model.asked[user]) == list(range(1, 9))


#: Crash states of the moves, built on the broker as a worker killed there left them:
#: what is unacked (held), on the delivering list, on its way back, parked; the rest of
#: the key's messages are on the queue.
STATES: dict[str, dict[str, Any]] = {
    "on its way at the queue head": {"unacked": 1, "coming": "queue", "parked": 3},
    "on its way on the delivering list": {"unacked": 1, "coming": "delivering", "parked": 3},
    "taken back and recorded, a newer one being parked": dict(unacked=2, parked=3, delivering=1),
    "parking under way": {"unacked": 2, "parked": 1, "delivering": 1},
}


@pytest.mark.parametrize("state", list(STATES))
def test_a_worker_killed_at_any_point_of_the_moves_loses_and_reorders_nothing(
    pipeline: Pipeline, fake_openai: FakeOpenAI, state: str
) -> None:
    (hot,) = users_on(0, 1, "s")
    model = RecordingModel(delay=0.01)
    fake_openai.default_chat = model
    client = redis.Redis.from_url(pipeline.broker_url)
    with pipeline.producer() as producer:
        ids = [
            producer.session_ended(("acme", "users", hot), "t", said(hot, n)) for n in range(1, 9)
        ]
        assert producer.flush(timeout=30)
    _crashed(client, _key(hot), **STATES[state])
    start_shard(pipeline, 0, C, **model_env(fake_openai))
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, ids, "acme", timeout=60)
        assert {reader.status(e, tenant="acme").state for e in ids} == {"applied"}
    assert model.asked[hot] == list(range(1, 9))  # each once, in publish order


def _key(user: str) -> str:
    return namespace_key(("acme", "users", user))


def _crashed(
    client: redis.Redis,
    key: str,
    *,
    unacked: int,
    parked: int,
    coming: str | None = None,
    delivering: int = 0,
) -> None:
    """Move the oldest messages of ``QUEUE`` (all of ``key``) as a worker that died mid
    way would have left them: ``unacked`` recorded, the next on its way back (on the
    queue head or the delivering list) when ``coming``, then ``parked``, then
    ``delivering`` popped but not yet parked."""

    def pop() -> bytes:
        item = client.rpop(QUEUE)  # the head: the oldest
        assert isinstance(item, bytes)
        return item

    for i in range(unacked):
        item = pop()
        tag = json.loads(item)["properties"]["delivery_tag"]
        client.hset("unacked", tag, b"[" + item + f',"","{QUEUE}"]'.encode())
        client.zadd("unacked_index", {tag: time.time() - 10 + i})
    on_its_way: bytes | None = pop() if coming else None
    for _ in range(parked):
        client.rpush(parked_key(QUEUE, key), pop())
    client.hset(parked_index_key(QUEUE), key, parked)
    for _ in range(delivering):
        client.lpush(delivering_key("", QUEUE), pop())
    if on_its_way is not None:
        tag = json.loads(on_its_way)["properties"]["delivery_tag"]
        client.hset(unparking_key(QUEUE), key, tag)
        target = QUEUE if coming == "queue" else delivering_key("", QUEUE)
        client.rpush(target, on_its_way)

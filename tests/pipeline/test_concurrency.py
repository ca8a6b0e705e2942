"""Ordered, not serial: one shard worker process keeps many events in flight across
namespaces, each namespace in publish order, through SIGKILLs; a hot namespace does not
hold back the others; the cross-worker LLM cap still bounds model calls.

Real ``celery worker`` processes in the ``threads`` layout of ``tulip-memory worker``
(:func:`tulip_ops.dev.supervisor.role_specs`), a model server that answers slowly.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import defaultdict
from typing import Any

from tests.pipeline.conftest import SHARDS, Pipeline
from tests.support.openai_server import FakeOpenAI, Reply
from tests.support.pg import dead_reason
from tests.support.workers import WorkerProcess
from tulip_memory.messages import Message, Role
from tulip_ops.dev.embedded import run_async
from tulip_ops.dev.supervisor import role_specs
from tulip_wire.events import namespace_key
from tulip_wire.routing import ShardRouter

SAID = re.compile(r"User (\w+) session (\d+)\. My favourite colour is (\w+)\.")
COLOURS = ["red", "green", "blue", "amber", "teal", "violet", "olive", "plum"]


class RecordingModel:
    """Answers extraction with the colour of the transcript's last session; records the
    order in which each user's sessions were asked."""

    def __init__(self, delay: float, slow_user: str | None = None, slow_delay: float = 0.0):
        self.delay = delay
        self.slow_user = slow_user
        self.slow_delay = slow_delay
        self.asked: dict[str, list[int]] = defaultdict(list)
        self.finished: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, request: Any) -> Reply:
        user, n, colour = SAID.findall(json.dumps(request["messages"]))[-1]
        with self._lock:
            self.asked[user].append(int(n))
            self.finished.append(user)
        item = {"type": "user", "key": "favourite-colour", "content": f"Favourite colour: {colour}"}
        delay = self.slow_delay if user == self.slow_user else self.delay
        return Reply(content=json.dumps([item]), delay=delay)


def said(user: str, n: int) -> list[Message]:
    colour = COLOURS[n % len(COLOURS)]
    return [
        Message(
            role=Role.USER, content=f"User {user} session {n}. My favourite colour is {colour}."
        )
    ]


def model_env(fake: FakeOpenAI, **extra: str) -> dict[str, str]:
    return {
        "TULIP_EXTRACT_MODEL": "openai/test-model",
        "TULIP_EXTRACT_API_BASE": fake.url,
        "TULIP_EXTRACT_API_KEY": "test",
        "TULIP_EXTRACT_TIMEOUT": "30",
        **extra,
    }


def shard(pipeline: Pipeline, k: int, concurrency: int, **env: str) -> WorkerProcess:
    """Shard ``k``'s extract worker exactly as ``tulip-memory worker extract`` lays it out
    (not started yet)."""
    (spec,) = role_specs("extract", SHARDS, [k], concurrency)
    return pipeline.workers.threaded(
        spec.name, list(spec.queues), spec.concurrency, {**pipeline.env(**env), **dict(spec.env)}
    )


def start_shard(pipeline: Pipeline, k: int, concurrency: int, **env: str) -> WorkerProcess:
    """:func:`shard`, started and ready."""
    (worker,) = pipeline.workers.start_all([shard(pipeline, k, concurrency, **env)])
    return worker


def users_on(shard: int, count: int, prefix: str) -> list[str]:
    router = ShardRouter("memory.extract", SHARDS)
    found: list[str] = []
    i = 0
    while len(found) < count:
        name = f"{prefix}{i}"
        if router.shard(namespace_key(("acme", "users", name))) == shard:
            found.append(name)
        i += 1
    return found


def first_asks(asked: list[int]) -> list[int]:
    """Each session's first ask, in the order they came (re-asks after a kill dropped)."""
    seen: set[int] = set()
    return [n for n in asked if not (n in seen or seen.add(n))]  # type: ignore[func-returns-value]


def test_many_in_flight_each_namespace_in_order_through_two_sigkills(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    model = RecordingModel(delay=0.15)
    fake_openai.default_chat = model
    # 240 events: at each kill more are still to come than the 128 a worker at C = 32
    # reserves (BUFFER_PER_SLOT), so it dies with its buffer full.
    users = users_on(0, 60, "u")
    sessions = 4
    env = model_env(fake_openai, TULIP_LLM_MAX_INFLIGHT="64")
    worker = start_shard(pipeline, 0, 32, **env)
    ids: dict[str, list[str]] = {}
    with pipeline.producer() as producer:
        for n in range(1, sessions + 1):
            for user in users:
                ns = ("acme", "users", user)
                ids.setdefault(user, []).append(
                    producer.session_ended(ns, f"t-{user}", said(user, n))
                )
        assert producer.flush(timeout=30)
    for cut in (50, 110):  # two SIGKILLs mid-run, each with many events in flight
        deadline = time.monotonic() + 120
        while sum(map(len, model.asked.values())) < cut and time.monotonic() < deadline:
            time.sleep(0.02)
        worker.kill()
        worker = start_shard(pipeline, 0, 32, **env)
    every = [e for user in users for e in ids[user]]
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, every, "acme", timeout=240)
        assert {reader.status(e, tenant="acme").state for e in every} == {
            "applied"
        }  # 0 lost, 0 dead
        for user in users:
            found = {m.key: m.content for m in reader.recall(("acme", "users", user), None)}
            last = COLOURS[sessions % len(COLOURS)]
            assert last in found["favourite-colour"], (user, found)  # nothing reordered
    for user in users:
        assert first_asks(model.asked[user]) == list(range(1, sessions + 1)), model.asked[user]
    assert 1 < fake_openai.max_inflight <= 32  # in flight together, never past C


def test_a_hot_namespace_does_not_hold_back_the_others_on_its_shard(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    hot, *others = users_on(0, 21, "h")
    model = RecordingModel(delay=0.0, slow_user=hot, slow_delay=0.25)
    fake_openai.default_chat = model
    start_shard(pipeline, 0, 8, **model_env(fake_openai))
    with pipeline.producer() as producer:
        hot_ids = [
            producer.session_ended(("acme", "users", hot), "t-hot", said(hot, n))
            for n in range(1, 41)
        ]  # queued first: 10 s of model time, one at a time
        other_ids = [
            producer.session_ended(("acme", "users", u), f"t-{u}", said(u, 1)) for u in others
        ]
        assert producer.flush(timeout=30)
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, other_ids, "acme", timeout=120)
        still_pending = [e for e in hot_ids if reader.status(e, tenant="acme").state == "pending"]
        assert still_pending, "the other namespaces waited for the whole hot backlog"
        pipeline.wait_applied(reader, hot_ids, "acme", timeout=120)
    assert model.asked[hot] == list(range(1, 41))


def test_the_llm_cap_holds_across_two_concurrent_shard_workers(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    model = RecordingModel(delay=0.2)
    fake_openai.default_chat = model
    env = model_env(fake_openai, TULIP_LLM_MAX_INFLIGHT="3")
    pipeline.workers.start_all([shard(pipeline, k, 8, **env) for k in range(SHARDS)])
    users = users_on(0, 10, "a") + users_on(1, 10, "b")
    with pipeline.producer() as producer:
        ids = [
            producer.session_ended(("acme", "users", u), f"t-{u}", said(u, n))
            for n in (1, 2)
            for u in users
        ]
        assert producer.flush(timeout=30)
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, ids, "acme", timeout=120)
    assert 1 < fake_openai.max_inflight <= 3


def test_a_message_that_kills_its_worker_is_dead_lettered_and_its_neighbours_are_not(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    """Two deaths while running the same message (an OOM, a native crash: SIGKILL here,
    in the model call) dead-letter it; the events that were running or waiting beside it
    when the worker died are applied, none dead-lettered for a death not theirs."""
    poison, *others = users_on(0, 13, "p")
    model = RecordingModel(delay=0.3)
    fake_openai.default_chat = model
    env = model_env(fake_openai, TULIP_MAX_WORKER_DEATHS="2")
    worker = start_shard(pipeline, 0, 4, **env)
    with pipeline.producer() as producer:
        first = [
            producer.session_ended(("acme", "users", u), f"t-{u}", said(u, 1)) for u in others[:3]
        ]
        poisoned = producer.session_ended(("acme", "users", poison), "t-p", said(poison, 1))
        rest = [
            producer.session_ended(("acme", "users", u), f"t-{u}", said(u, n))
            for n in (1, 2)
            for u in others[3:]
        ]
        assert producer.flush(timeout=30)
    for death in (1, 2):
        deadline = time.monotonic() + 60
        while len(model.asked[poison]) < death and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(model.asked[poison]) == death
        worker.kill()  # while it runs the poison's model call
        worker = start_shard(pipeline, 0, 4, **env)
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, [*first, poisoned, *rest], "acme", timeout=120)
        verdict = reader.status(poisoned, tenant="acme")
        assert verdict.state == "dead" and (verdict.reason or "").startswith("WorkerLost (")
        assert "killed its worker 2 times" in run_async(dead_reason(pipeline.admin_url, poisoned))
        assert {reader.status(e, tenant="acme").state for e in [*first, *rest]} == {"applied"}
    assert len(model.asked[poison]) == 2  # the third delivery never reached the model

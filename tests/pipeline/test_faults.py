"""The pipeline under faults, with real celery workers and a real model server.

The extraction model is the local OpenAI-compatible server: it answers from the
session text ("Session N. My favourite colour is X") and records the order it was asked in.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from typing import Any

import asyncpg

from tests.pipeline.conftest import SHARDS, Pipeline
from tests.support.openai_server import FakeOpenAI, Reply
from tulip_memory.messages import Message, Role
from tulip_ops.dev.embedded import EmbeddedRedis
from tulip_wire.events import namespace_key
from tulip_wire.routing import ShardRouter
from tulip_workers import dlq

SESSION = re.compile(r"Session (\d+)\. My favourite colour is (\w+)")


def session(n: int, colour: str) -> list[Message]:
    return [Message(role=Role.USER, content=f"Session {n}. My favourite colour is {colour}.")]


class ColourModel:
    """Answers an extraction request with the colour its transcript states."""

    def __init__(self, delay: float = 0.0, poison: int | None = None) -> None:
        self.delay = delay
        self.poison = poison
        self.asked: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, request: Any) -> Reply:
        text = json.dumps(request["messages"])
        n, colour = SESSION.findall(text)[-1]
        with self._lock:
            self.asked.append(int(n))
        if self.poison is not None and int(n) == self.poison:
            return Reply(content="Sorry, I cannot produce JSON today.", delay=self.delay)
        item = {"type": "user", "key": "favourite-colour", "content": f"Favourite colour: {colour}"}
        return Reply(content=json.dumps([item]), delay=self.delay)


def model_env(fake: FakeOpenAI) -> dict[str, str]:
    return {
        "TULIP_EXTRACT_MODEL": "openai/test-model",
        "TULIP_EXTRACT_API_BASE": fake.url,
        "TULIP_EXTRACT_API_KEY": "test",
        "TULIP_EXTRACT_TIMEOUT": "20",
    }


def shard_of(ns: tuple[str, ...]) -> int:
    return ShardRouter("memory.extract", SHARDS).shard(namespace_key(ns))


def favourite(pipeline: Pipeline, ns: tuple[str, ...]) -> str:
    with pipeline.reader() as reader:
        found = {m.key: m.content for m in reader.recall(ns, None)}
    return found.get("favourite-colour", "")


def test_sigkill_mid_extraction_loses_nothing_and_keeps_order(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    model = ColourModel(delay=0.4)
    fake_openai.default_chat = model
    ns = ("acme", "users", "killed")
    k = shard_of(ns)
    pipeline.start_shard(k, **model_env(fake_openai))
    colours = ["red", "green", "blue", "amber", "teal", "violet", "olive", "plum"]
    with pipeline.producer() as producer:
        ids = [producer.session_ended(ns, "t", session(i + 1, c)) for i, c in enumerate(colours)]
    deadline = time.monotonic() + 60
    while 4 not in model.asked and time.monotonic() < deadline:
        time.sleep(0.02)
    assert 4 in model.asked
    victim = next(w for w in pipeline.workers.started if w.name == f"extract-{k}")
    victim.kill()  # inside the model call of session 4: unacked, half done
    pipeline.start_shard(k, **model_env(fake_openai))
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, ids, ns[0])
        statuses = [reader.status(e, tenant=ns[0]) for e in ids]
    assert all(s.state == "applied" for s in statuses)
    # Session 4 was asked again after the restart, and before anything later.
    first_after_4 = model.asked[model.asked.index(4) + 1]
    assert first_after_4 == 4, model.asked
    assert sorted(set(model.asked)) == list(range(1, 9))
    assert [n for i, n in enumerate(model.asked) if n not in model.asked[:i]] == list(range(1, 9))
    assert "plum" in favourite(pipeline, ns)


def test_rate_limits_are_retried_in_place_and_order_holds(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    model = ColourModel()
    fake_openai.default_chat = model
    fake_openai.script_chat(
        Reply(status=429, headers={"Retry-After": "0"}), Reply(status=429, body=None)
    )
    ns = ("acme", "users", "limited")
    pipeline.start_shard(shard_of(ns), **model_env(fake_openai))
    with pipeline.producer() as producer:
        ids = [
            producer.session_ended(ns, "t", session(i, c))
            for i, c in enumerate(["red", "green", "blue"], start=1)
        ]
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, ids, ns[0])
        assert [reader.status(e, tenant=ns[0]).state for e in ids] == ["applied"] * 3
    assert model.asked == [1, 2, 3]  # the two 429s came before session 1's answer
    assert "blue" in favourite(pipeline, ns)


def test_poison_event_is_dead_lettered_and_a_later_replay_changes_nothing_newer(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    model = ColourModel(poison=2)
    fake_openai.default_chat = model
    ns = ("acme", "users", "poisoned")
    pipeline.start_shard(shard_of(ns), **model_env(fake_openai), TULIP_EXTRACT_ATTEMPTS="2")
    with pipeline.producer() as producer:
        ids = [
            producer.session_ended(ns, "t", session(i, c))
            for i, c in enumerate(["red", "green", "blue"], start=1)
        ]
        with pipeline.reader() as reader:
            pipeline.wait_applied(reader, ids, ns[0])
            states = [reader.status(e, tenant=ns[0]) for e in ids]
        assert [s.state for s in states] == ["applied", "dead", "applied"]
        assert "UnusableAnswer" in (states[1].reason or "")  # no paid retry
        assert "blue" in favourite(pipeline, ns)
        # The model is fixed; the dead letter is replayed with its original seq.
        model.poison = None

        async def replay() -> None:
            conn = await asyncpg.connect(pipeline.admin_url)
            try:
                await dlq.replay(conn, ids[1], producer.republish)
            finally:
                await conn.close()

        asyncio.run(replay())
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, [ids[1]], ns[0])
        # Recorded, its write lost to session 3's newer fact under the sequence fence.
        assert reader.status(ids[1], tenant=ns[0]).state == "superseded"
    assert "blue" in favourite(pipeline, ns)  # session 2's green did not roll it back


def test_broker_outage_while_publishing_spools_then_delivers_in_order(
    pipeline: Pipeline, tmp_path: Any
) -> None:
    own = EmbeddedRedis(tmp_path / "broker").start()
    pipeline.broker_url = own.url
    try:
        pipeline.start_shards()
        namespaces = [("outage", "users", f"u{i}") for i in range(10)]
        with pipeline.producer() as producer:
            own.stop()
            ids = []
            for r in range(50):  # 500 events: five of the producer's flush batches
                for ns in namespaces:
                    colour = f"c{r:03d}"
                    ids.append(producer.session_ended(ns, "t", session(r, colour)))
            assert producer.spooled == 500
            own.start()
            assert producer.flush(timeout=60)
        with pipeline.reader() as reader:
            pipeline.wait_applied(reader, ids, ns[0], timeout=240)
            assert all(reader.status(e, tenant=ns[0]).state == "applied" for e in ids)
        for ns in namespaces:
            assert "c049" in favourite(pipeline, ns)
    finally:
        own.stop()

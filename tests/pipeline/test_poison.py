"""No message stops a shard, and no outage makes a dead letter (real workers).

Poison bodies go straight onto a shard queue, as any client of the broker can send
them; normal events follow on the same shard. Flower runs beside the worker, so the
dead letters are read back from its ``/api/tasks``, where operators look.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from tests.pipeline.conftest import Pipeline
from tests.pipeline.test_faults import ColourModel, model_env, session, shard_of
from tests.support.openai_server import FakeOpenAI
from tests.support.pg import dead_reason
from tests.support.services import APP_ROLE
from tests.support.workers import WorkerProcess, worker_env
from tulip_memory.embeddings import HashingEmbedder
from tulip_memory.store import PgMemory
from tulip_ops.dev.embedded import EmbeddedPostgres, EmbeddedRedis, run_async
from tulip_ops.dev.flower import Flower
from tulip_ops.provision import migrate_now
from tulip_wire.endpoints import kombu_url
from tulip_wire.events import SESSION_ENDED, TASKS, session_ended
from tulip_wire.routing import ShardRouter
from tulip_workers.deadletters import UNKNOWN_TENANT


def sender(broker_url: str) -> Celery:
    """A broker client of no producer's: it sends whatever body it is given."""
    app = Celery("tulip_poison_sender")
    app.config_from_object("tulip_wire.celeryconfig")
    app.conf.broker_url = kombu_url(broker_url)
    return app


def poison_bodies(ns: tuple[str, ...]) -> dict[str, Any]:
    lone = session_ended(ns, "t", session(0, "grey"), ts=time.time()).with_seq(1)
    text = json.dumps(lone.to_dict()).replace("grey", "\\ud83d")  # an escaped lone surrogate
    return {
        "raw NUL byte": '{"v": 1, "id": "' + "a" * 31 + '\x00", "type": "session.ended"}',
        "int body": 123,
        "nested 100,000 deep": "[" * 100_000 + "]" * 100_000,
        "lone surrogate": text,
    }


@pytest.fixture
def flower(pipeline: Pipeline, tmp_path: Path) -> Iterator[Flower]:
    env = worker_env(**pipeline.env())
    server = Flower(env, tmp_path / "flower.log").start()
    try:
        yield server
    finally:
        server.stop()


def flower_tasks(flower: Flower) -> dict[str, Any]:
    request = urllib.request.Request(f"{flower.url}/api/tasks")
    token = base64.b64encode(f"{flower.user}:{flower.password}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        tasks: dict[str, Any] = json.load(response)
    return tasks


def wait_for(what: str, check: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what} within {timeout}s")


def test_poison_bodies_are_dead_letters_failed_in_flower_and_the_shard_goes_on(
    pipeline: Pipeline, flower: Flower
) -> None:
    ns = ("acme", "users", "after-poison")
    k = shard_of(ns)
    queue = ShardRouter("memory.extract", 2).queues()[k]
    pipeline.start_shard(k)
    app = sender(pipeline.broker_url)
    poison = {kind: uuid.uuid4().hex for kind in poison_bodies(ns)}
    try:
        for kind, body in poison_bodies(ns).items():
            app.send_task(
                TASKS[SESSION_ENDED],
                args=[body],
                queue=queue,
                routing_key=queue,
                task_id=poison[kind],
            )
    finally:
        app.close()
    colours = ["red", "green", "blue", "amber"]
    with pipeline.producer() as producer:
        ids = [producer.session_ended(ns, "t", session(i, c)) for i, c in enumerate(colours)]
        assert producer.flush(timeout=30)
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, list(poison.values()), UNKNOWN_TENANT, timeout=60)
        pipeline.wait_applied(reader, ids, "acme", timeout=60)
        for kind, task_id in poison.items():  # too malformed to name a tenant
            status = reader.status(task_id, tenant=UNKNOWN_TENANT)
            assert status.state == "dead" and status.reason, (kind, status)
        assert [reader.status(e, tenant="acme").state for e in ids] == ["applied"] * 4
        found = {m.key: m.content for m in reader.recall(ns, None)}
    assert "amber" in found["favourite-colour"]  # the last one, applied after the others

    def failed() -> dict[str, Any] | None:
        tasks = flower_tasks(flower)
        done = {t: tasks[t] for t in poison.values() if tasks.get(t, {}).get("state") == "FAILURE"}
        return done if len(done) == len(poison) else None

    shown = wait_for("every poison task FAILURE in Flower", failed, timeout=30)
    assert all("DeadLettered" in (task["exception"] or "") for task in shown.values())
    # Each says the attempts it took (a malformed event gets one: no retry can cure it).
    assert all(" after 1 attempt on " in (task["exception"] or "") for task in shown.values())
    assert all(flower_tasks(flower)[e]["state"] == "SUCCESS" for e in ids)


def test_a_redis_restart_mid_stream_dead_letters_nothing_and_keeps_order(
    pipeline: Pipeline, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """Every extraction takes a slot of the LLM semaphore in Redis: with Redis away,
    the shard waits in place instead of using up the events' attempts."""
    fake_openai.default_chat = ColourModel(delay=0.05)
    own = EmbeddedRedis(tmp_path / "broker").start()
    pipeline.broker_url = own.url
    namespaces = [("restart", "users", f"u{i}") for i in range(6)]
    try:
        pipeline.start_shards(**model_env(fake_openai))
        with pipeline.producer() as producer:
            ids: list[str] = []

            def publish(rounds: range) -> None:
                for r in rounds:
                    for ns in namespaces:
                        ids.append(producer.session_ended(ns, "t", session(r, f"c{r:03d}")))

            publish(range(0, 10))
            # Wait until the workers are in the middle of the stream, then take Redis away.
            with pipeline.reader() as reader:
                wait_for(
                    "some events applied",
                    lambda: reader.status(ids[6], tenant="restart").state != "pending",
                )
            own.stop()
            publisher = threading.Thread(target=publish, args=(range(10, 20),))
            publisher.start()
            time.sleep(8)  # longer than the attempts' backoff (the fault, not an assertion)
            own.start()
            publisher.join(60)
            assert producer.flush(timeout=60)
        with pipeline.reader() as reader:
            pipeline.wait_applied(reader, ids, "restart", timeout=180)
            states = [reader.status(e, tenant="restart") for e in ids]
        assert [s.reason for s in states if s.state != "applied"] == []
        for ns in namespaces:
            with pipeline.reader() as reader:
                found = {m.key: m.content for m in reader.recall(ns, None)}
            assert "c019" in found["favourite-colour"]
    finally:
        own.stop()


class Killer(ColourModel):
    """Answers like :class:`ColourModel`, but holds session ``victim``'s call open: the
    test kills the worker inside it, like a message that runs its worker out of memory."""

    def __init__(self, victim: int) -> None:
        super().__init__()
        self.victim = victim

    def __call__(self, request: Any) -> Any:
        reply = super().__call__(request)
        if self.asked[-1] == self.victim:
            reply.delay = 60.0
        return reply


def test_a_message_that_kills_its_worker_every_time_ends_as_a_dead_letter(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    model = Killer(victim=1)
    fake_openai.default_chat = model
    ns = ("acme", "users", "killer")
    k = shard_of(ns)
    settings = {**model_env(fake_openai), "TULIP_MAX_WORKER_DEATHS": "2"}
    pipeline.start_shard(k, **settings)
    with pipeline.producer() as producer:
        ids = [producer.session_ended(ns, "t", session(i, c)) for i, c in [(1, "red"), (2, "teal")]]
    for death in (1, 2):
        wait_for(f"death {death} in the model call", lambda d=death: model.asked.count(1) >= d)
        pipeline.workers.started[-1].kill()
        pipeline.start_shard(k, **settings)
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, ids, "acme", timeout=60)
        killer, after = reader.status(ids[0], tenant="acme"), reader.status(ids[1], tenant="acme")
    assert killer.state == "dead" and (killer.reason or "").startswith("WorkerLost (")
    assert (
        run_async(dead_reason(pipeline.admin_url, ids[0]))
        == "WorkerLost: killed its worker 2 times"
    )
    assert after.state == "applied"
    assert model.asked == [1, 1, 2]  # the third delivery was not run, and nothing overtook it


def test_model_calls_longer_than_the_lease_never_exceed_the_cap(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    # Each call is one and a half leases long: without renewal the other shard's worker
    # would get in for its last second. A 2 s lease is renewed every 2/3 s, so on a
    # loaded host a renewal may be 1.3 s late before the lease lapses.
    fake_openai.default_chat = ColourModel(delay=3.0)
    settings = {
        **model_env(fake_openai),
        "TULIP_LLM_MAX_INFLIGHT": "1",
        "TULIP_LLM_LEASE_SECONDS": "2",
    }
    pipeline.start_shards(**settings)
    on_each_shard = {shard_of(("lease", f"u{i}")): ("lease", f"u{i}") for i in range(20)}
    assert len(on_each_shard) == 2
    with pipeline.producer() as producer:
        ids = [
            producer.session_ended(ns, "t", session(n, "red"))
            for n in range(2)
            for ns in on_each_shard.values()
        ]
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, ids, "lease", timeout=120)
        assert [reader.status(e, tenant="lease").state for e in ids] == ["applied"] * 4
    assert fake_openai.max_inflight == 1


def test_a_worker_whose_broker_is_down_says_which_one_at_once_and_again(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    env = worker_env(**pipeline.env(TULIP_BROKER_URL="redis://:hunter2-secret@127.0.0.1:1/0"))
    worker = WorkerProcess("no-broker", ["memory.extract.0"], env, tmp_path / "no-broker.log")
    pipeline.workers.started.append(worker)
    worker.start(wait=False)
    line = re.compile(
        r"cannot reach the broker at redis://\S*@127\.0\.0\.1:1/0 \(TULIP_BROKER_URL\)"
    )
    wait_for("two attempts logged", lambda: len(line.findall(worker.output())) >= 2, timeout=60)
    assert "hunter2-secret" not in worker.output()


def test_a_postgres_restart_mid_stream_dead_letters_nothing_and_keeps_order(
    pipeline: Pipeline,
) -> None:
    data = Path(tempfile.mkdtemp(prefix="tulip-pg-"))  # short: the socket lives in it
    own = EmbeddedPostgres(data, keep=True).start(APP_ROLE)
    pipeline.database_url, pipeline.admin_url = own.app_dsn, own.admin_dsn
    embedder = HashingEmbedder(384)
    migrate_now(
        PgMemory(own.app_dsn, table=pipeline.table, embedder=embedder, migrator=own.admin_dsn)
    )
    namespaces = [("pg-restart", "users", f"u{i}") for i in range(6)]
    try:
        pipeline.start_shards()
        with pipeline.producer() as producer:
            ids = [
                producer.session_ended(ns, "t", session(r, f"c{r:03d}"))
                for r in range(30)
                for ns in namespaces
            ]
            with pipeline.reader() as reader:
                wait_for(
                    "some events applied",
                    lambda: reader.status(ids[12], tenant="pg-restart").state != "pending",
                )
            own.stop()
            ids += [
                producer.session_ended(ns, "t", session(r, f"c{r:03d}"))
                for r in range(30, 40)
                for ns in namespaces
            ]
            time.sleep(5)  # the outage (the fault, not an assertion)
            own.start(APP_ROLE)
            assert producer.flush(timeout=60)
        with pipeline.reader() as reader:
            pipeline.wait_applied(reader, ids, "pg-restart", timeout=180)
            states = [reader.status(e, tenant="pg-restart") for e in ids]
            assert [s.reason for s in states if s.state != "applied"] == []
            for ns in namespaces:
                found = {m.key: m.content for m in reader.recall(ns, None)}
                assert "c039" in found["favourite-colour"]
        # The outage did hit the stream: a worker waited for Postgres, in place.
        assert any("a dependency is unreachable" in w.output() for w in pipeline.workers.started)
    finally:
        own.stop()
        shutil.rmtree(data, ignore_errors=True)

"""A shard worker killed mid-task gets its message re-run before any later message.

Real ``celery worker -P solo`` processes (``tests/support/redelivery_app.py``) against
a real Redis; kombu's keys get a prefix of each test's own, which also exercises
``global_keyprefix``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from celery import Celery
from kombu import Connection, Exchange, Queue

from tests.support.redelivery_app import TASK_NAME
from tulip_ops.dev.supervisor import WorkerSpec
from tulip_wire import celeryconfig
from tulip_wire.topology import DEATHS_PREFIX
from tulip_workers.redelivery import (
    DEATHS_TTL,
    deaths,
    ordered_queues,
    restore_for_worker,
    restore_unacked,
    running,
)

ROOT = Path(__file__).resolve().parents[2]
REDELIVERY_APP = "tests.support.redelivery_app"
QUEUE = "memory.extract.0"
OTHER = "memory.extract.1"
#: The shard lease of the workers (seconds): a restarted worker waits for its killed
#: predecessor's lease to lapse before it restores and consumes (the default 10 s took
#: most of a loaded machine's time budget).
LEASE = 2.0


def kombu_url(redis_url: str) -> str:
    """kombu spells a unix socket ``redis+socket:///path``."""
    if redis_url.startswith("unix://"):
        return "redis+socket://" + redis_url.removeprefix("unix://")
    return redis_url


@dataclass
class Shard:
    """One shard queue, its workers (started and killed at will) and what they ran."""

    redis_url: str
    tmp: Path
    prefix: str = field(default_factory=lambda: f"test-{uuid.uuid4().hex[:10]}:")
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def broker(self) -> str:
        return kombu_url(self.redis_url)

    @property
    def log_key(self) -> str:
        return f"{self.prefix}log"

    def publisher(self) -> Celery:
        app = Celery("tulip_redelivery_publisher")
        app.config_from_object("tulip_wire.celeryconfig")
        app.conf.broker_url = self.broker
        app.conf.broker_transport_options = {
            **celeryconfig.broker_transport_options,
            "global_keyprefix": self.prefix,
        }
        return app

    def publish(self, values: range, hold_at: int) -> None:
        app = self.publisher()
        try:
            with app.connection_for_write() as conn:
                app.amqp.queues[QUEUE].bind(conn.default_channel).declare()
            for v in values:
                app.send_task(TASK_NAME, args=[v, 60.0 if v == hold_at else 0.0], queue=QUEUE)
        finally:
            app.close()

    def start_worker(self, name: str, install: bool) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TULIP_")}
        env.update(
            TULIP_BROKER_URL=self.broker,
            TULIP_TEST_KEYPREFIX=self.prefix,
            TULIP_TEST_REDELIVERY="1" if install else "0",
            TULIP_TEST_LOG_URL=self.redis_url,
            TULIP_TEST_LOG_KEY=self.log_key,
            TULIP_SHARD_LEASE_SECONDS=str(LEASE),
            PYTHONPATH=str(ROOT),
            LITELLM_LOCAL_MODEL_COST_MAP="True",
        )
        with open(self.tmp / f"{name}.log", "wb") as out:
            proc = subprocess.Popen(
                WorkerSpec(
                    name, (QUEUE,), app=REDELIVERY_APP, events=False, heartbeat=False
                ).command(),
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc

    def output(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def records(self) -> list[str]:
        with redis.Redis.from_url(self.redis_url) as r:
            return [v.decode() for v in r.lrange(self.log_key, 0, -1)]

    def unacked(self) -> int:
        with redis.Redis.from_url(self.redis_url) as r:
            return int(r.hlen(f"{self.prefix}unacked"))

    def wait_for(self, record: str, name: str, timeout: float = 60.0) -> None:
        proc = self.procs[-1]
        deadline = time.monotonic() + timeout
        while record not in self.records():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no {record!r}; log {self.records()}:\n{self.output(name)}")
            time.sleep(0.05)

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def shard(redis_url: str, tmp_path: Path) -> Iterator[Shard]:
    s = Shard(redis_url, tmp_path)
    try:
        yield s
    finally:
        s.kill_all()  # no worker outlives its test


def kill_during_3_then_restart(shard: Shard, install: bool) -> None:
    """Publish 1..10; SIGKILL the worker inside 3; restart it and let it drain the queue."""
    shard.publish(range(1, 11), hold_at=3)
    shard.start_worker("first", install)
    shard.wait_for("start:3", "first")
    shard.procs[-1].send_signal(signal.SIGKILL)
    shard.procs[-1].wait(10)
    shard.start_worker("second", install)
    shard.wait_for("done:10", "second")  # start-up, the lease's lapse, 8 tasks
    shard.stop(shard.procs[-1])


def received(output: str) -> list[str]:
    """Task ids in the order a worker's log says it received them."""
    return re.findall(rf"Task {re.escape(TASK_NAME)}\[([0-9a-f-]+)\] received", output)


def numbers(records: list[str], kind: str) -> list[int]:
    return [int(r.split(":")[1]) for r in records if r.startswith(f"{kind}:")]


def test_killed_message_is_rerun_before_any_later_one(shard: Shard) -> None:
    kill_during_3_then_restart(shard, install=True)
    records = shard.records()
    assert numbers(records, "start") == [1, 2, 3, 3, *range(4, 11)], records
    assert numbers(records, "done") == list(range(1, 11)), records
    assert shard.unacked() == 0
    # The restore ran before the restarted worker received anything, and the first
    # task it received is the very message the killed worker was running.
    out = shard.output("second")
    restored = out.index(f"restored 1 unacked message(s) to the head of ['{QUEUE}']")
    assert restored < out.index(f"Task {TASK_NAME}[")
    assert received(out)[0] == received(shard.output("first"))[-1]


def test_without_install_later_messages_overtake_the_killed_one(shard: Shard) -> None:
    kill_during_3_then_restart(shard, install=False)
    records = shard.records()
    assert numbers(records, "start") == list(range(1, 11)), records
    assert numbers(records, "done") == [1, 2, *range(4, 11)], records  # 4 before 3
    assert shard.unacked() == 1  # 3 waits out the two-hour visibility timeout
    with Connection(shard.broker, transport_options={"global_keyprefix": shard.prefix}) as conn:
        assert restore_unacked(conn, [QUEUE]) == 1
        assert conn.default_channel._size(QUEUE) == 1
    assert shard.unacked() == 0


def test_restore_puts_messages_back_oldest_first_and_leaves_other_queues(redis_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex[:10]}:"
    exchange = Exchange("memory", type="direct")
    queues = [Queue(q, exchange, routing_key=q) for q in (QUEUE, OTHER)]
    options = {"global_keyprefix": prefix}
    with Connection(kombu_url(redis_url), transport_options=options) as conn:
        producer = conn.Producer()
        for n in range(1, 6):
            for q in (QUEUE, OTHER):
                producer.publish({"n": n}, exchange=exchange, routing_key=q, declare=queues)
        dead = conn.channel()
        taken = [dead.basic_get(QUEUE) for _ in range(3)] + [dead.basic_get(OTHER)]
        assert [m.payload["n"] for m in taken] == [1, 2, 3, 1]
        dead.qos._delivered.clear()  # as if SIGKILLed: no restore on close

    with Connection(kombu_url(redis_url), transport_options=options) as conn:
        assert restore_unacked(conn, [QUEUE]) == 3
        assert restore_unacked(conn.default_channel, [QUEUE]) == 0  # already moved
        channel = conn.default_channel
        got = []
        while (m := channel.basic_get(QUEUE, no_ack=True)) is not None:
            got.append((m.payload["n"], m.delivery_info.get("redelivered", False)))
        assert got == [(1, True), (2, True), (3, True), (4, False), (5, False)]
    with redis.Redis.from_url(redis_url) as r:
        assert r.hlen(f"{prefix}unacked") == r.zcard(f"{prefix}unacked_index") == 1  # OTHER's


def test_deaths_are_the_runs_that_never_ended(redis_url: str) -> None:
    """A run counts from its start until it ends, however it ends: what a worker that
    died leaves is exactly the runs it never finished; a message only waiting in its
    buffer never ran, so it has no count; a call from no queue is not counted."""
    tag = uuid.uuid4().hex[:10]
    ended, died, waited = (f"{tag}-{n}" for n in ("ended", "died", "waited"))
    with running(QUEUE, ended, redis_url):
        assert deaths(ended, redis_url) == 1  # while it runs
    with pytest.raises(RuntimeError), running(QUEUE, ended, redis_url):
        raise RuntimeError("the task failed: its run ended all the same")
    assert deaths(ended, redis_url) == 0
    killed = [running(QUEUE, died, redis_url) for _ in range(2)]  # SIGKILLed mid-run, twice:
    for run in killed:  # entered, never left (kept referenced: no generator cleanup runs)
        run.__enter__()
    assert deaths(died, redis_url) == 2
    assert deaths(waited, redis_url) == 0
    with running(None, waited, redis_url):
        assert deaths(waited, redis_url) == 0
    with redis.Redis.from_url(redis_url) as r:
        assert 0 < int(r.ttl(f"{DEATHS_PREFIX}{died}")) <= DEATHS_TTL
    with running(QUEUE, died, redis_url):  # its next run ends: the message is done
        pass
    assert deaths(died, redis_url) == 0


def test_restore_keeps_a_messages_priority_list(redis_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex[:10]}:"
    queue = Queue(QUEUE, Exchange("memory", type="direct"), routing_key=QUEUE)
    options = {"global_keyprefix": prefix}
    with Connection(kombu_url(redis_url), transport_options=options) as conn:
        conn.Producer().publish(
            {"n": 1}, exchange=queue.exchange, routing_key=QUEUE, declare=[queue], priority=5
        )
        dead = conn.channel()
        assert dead.basic_get(QUEUE) is not None
        dead.qos._delivered.clear()
        list_key = prefix + dead._q_for_pri(QUEUE, 5)
    with Connection(kombu_url(redis_url), transport_options=options) as conn:
        assert restore_unacked(conn, [QUEUE]) == 1
    with redis.Redis.from_url(redis_url) as r:
        assert r.llen(list_key) == 1 and list_key != prefix + QUEUE


def test_only_shard_queues_are_restored() -> None:
    names = ["memory.summarize", "memory.checkpoint.2", "memory.extract.1", "celery"]
    assert ordered_queues(names) == ["memory.checkpoint.2", "memory.extract.1"]


def test_restore_for_worker_leaves_other_brokers_alone() -> None:
    app = Celery("tulip_redelivery_amqp", broker="amqp://guest@127.0.0.1:1//")
    assert restore_for_worker(app, [QUEUE]) == 0  # returns without connecting


def test_a_worker_whose_restore_fails_stops_before_consuming(shard: Shard) -> None:
    shard.publish(range(1, 3), hold_at=0)
    with redis.Redis.from_url(shard.redis_url) as r:
        r.set(f"{shard.prefix}unacked", "not a hash")  # every read of it fails
    proc = shard.start_worker("broken", install=True)
    assert proc.wait(30) == 1
    assert "could not restore unacked messages" in shard.output("broken")
    assert shard.records() == []  # it consumed nothing

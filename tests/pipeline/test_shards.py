"""One owner per shard queue: a standby consumes nothing, takes over a dead owner's queue
in order, a paused owner woken past its lease consumes and acks nothing more, and a warm
shutdown hands the queue over (:mod:`tulip_workers.lease`, :mod:`tulip_workers.fencing`).

Real ``celery worker`` processes in the ``threads`` layout of ``tulip-memory worker``, a
short lease (``TULIP_SHARD_LEASE_SECONDS``), the broker's Redis as the tests' own. Each
worker of a shard asks the model under a name of its own, so each event's worker is
recorded.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from typing import Any

import redis

from tests.pipeline.conftest import SHARDS, Pipeline
from tests.pipeline.test_concurrency import SAID, model_env, said, users_on
from tests.pipeline.test_metrics import metrics, scrape
from tests.support.openai_server import FakeOpenAI, Reply
from tests.support.workers import ROOT, WorkerProcess, worker_env
from tulip_ops.dev.supervisor import role_specs
from tulip_wire.topology import lease_key

QUEUE = "memory.extract.0"
LEASE = 1.5  # seconds: a takeover within a few
#: A handover's lease: released, not lapsed, so its length does not slow the test, and a
#: renewal stalled by a loaded machine does not lapse it (fencing the owner, an exit 75).
HANDOVER_LEASE = 6.0
C = 2
__all__ = ["metrics"]  # the fixture


class WhoAsked:
    """Answers extraction like the other pipeline tests' model; records, per user, the
    sessions asked in order and which worker (its model name) asked each."""

    def __init__(self, delay: float = 0.01) -> None:
        self.delay = delay
        self.asked: dict[str, list[int]] = defaultdict(list)
        self.by: dict[str, list[str]] = defaultdict(list)
        self._lock = threading.Lock()

    def __call__(self, request: Any) -> Reply:
        user, n, colour = SAID.findall(json.dumps(request["messages"]))[-1]
        with self._lock:
            self.asked[user].append(int(n))
            self.by[user].append(str(request["model"]))
        item = {"type": "user", "key": "favourite-colour", "content": f"Favourite colour: {colour}"}
        return Reply(content=json.dumps([item]), delay=self.delay)

    def workers(self) -> set[str]:
        return {w for names in self.by.values() for w in names}


def shard_worker(pipeline: Pipeline, fake: FakeOpenAI, name: str, **extra: str) -> WorkerProcess:
    """A worker of shard 0 laid out as ``tulip-memory worker extract`` does, asking the
    model as ``name`` (not started); its lease :data:`LEASE` unless ``extra`` says."""
    (spec,) = role_specs("extract", SHARDS, [0], C)
    env = model_env(fake, TULIP_EXTRACT_MODEL=f"openai/{name}", **extra)
    env.setdefault("TULIP_SHARD_LEASE_SECONDS", str(LEASE))
    return pipeline.workers.threaded(
        name, list(spec.queues), spec.concurrency, {**pipeline.env(**env), **dict(spec.env)}
    )


def owner_and_standby(
    pipeline: Pipeline, fake: FakeOpenAI, lease: float = LEASE
) -> tuple[WorkerProcess, WorkerProcess]:
    """Two workers of shard 0, started side by side: (the owner, the standby)."""
    a, b = pipeline.workers.start_all(
        [
            shard_worker(pipeline, fake, name, TULIP_SHARD_LEASE_SECONDS=str(lease))
            for name in ("shard0-a", "shard0-b")
        ]
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        owners = [w for w in (a, b) if "owner of memory.extract.0" in w.output()]
        standbys = [w for w in (a, b) if "standby for memory.extract.0" in w.output()]
        if owners and standbys:
            return owners[0], standbys[0]
        time.sleep(0.05)
    raise AssertionError(f"no owner and standby:\n{a.output()}\n{b.output()}")


def inspect_stats(pipeline: Pipeline) -> dict[str, Any]:
    """``celery inspect stats`` of every worker, by name (before the ``@``)."""
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tulip_workers.app", "inspect", "stats", "-j"],
        cwd=ROOT, env=worker_env(**pipeline.env()), capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    replies = json.loads(done.stdout[done.stdout.index("{") :])
    return {name.split("@")[0]: reply for name, reply in replies.items()}


def publish(pipeline: Pipeline, users: list[str], first: int, last: int) -> list[str]:
    with pipeline.producer() as producer:
        ids = [
            producer.session_ended(("acme", "users", u), f"t-{u}", said(u, n))
            for n in range(first, last + 1)
            for u in users
        ]
        assert producer.flush(timeout=30)
    return ids


def applied(pipeline: Pipeline, ids: list[str], timeout: float = 90) -> None:
    with pipeline.reader() as reader:
        pipeline.wait_applied(reader, ids, "acme", timeout=timeout)
        assert {reader.status(e, tenant="acme").state for e in ids} == {"applied"}


def name_of(worker: WorkerProcess) -> str:
    return worker.name  # litellm sends the model name without its provider


def owner_now(pipeline: Pipeline, workers: list[WorkerProcess]) -> WorkerProcess:
    """The one of ``workers`` whose name the lease of shard 0 carries (once one holds it:
    just after a handover a standby may not have asked yet)."""
    deadline = time.monotonic() + 30
    with redis.Redis.from_url(pipeline.broker_url, decode_responses=True) as client:
        while time.monotonic() < deadline:
            owner = str(client.hget(lease_key(QUEUE), "owner"))
            if found := [w for w in workers if owner.startswith(f"{w.name}@")]:
                return found[0]
            time.sleep(0.05)
    raise AssertionError(f"none of {[w.name for w in workers]} owns {QUEUE}")


def test_two_workers_of_one_shard_one_consumes_the_other_stands_by(
    pipeline: Pipeline, fake_openai: FakeOpenAI, metrics: str
) -> None:
    model = WhoAsked()
    fake_openai.default_chat = model
    owner, standby = owner_and_standby(pipeline, fake_openai)
    scraped = scrape(metrics)
    assert scraped is not None
    owners = {dict(k[1])["worker"] for k in scraped if k[0] == "tulip_shard_owner"}
    standbys = {
        dict(k[1])["worker"]
        for k in scraped
        if k[0] == "tulip_shard_standby" and dict(k[1])["queue"] == QUEUE
    }
    assert [w.split("@")[0] for w in owners] == [owner.name]
    assert [w.split("@")[0] for w in standbys] == [standby.name]
    stats = inspect_stats(pipeline)  # what Flower's worker page shows
    assert stats[owner.name]["shards"][QUEUE].startswith("owner (fencing token")
    assert stats[standby.name]["shards"][QUEUE].startswith(f"standby (owned by {owner.name}@")
    users = users_on(0, 5, "two")
    ids = publish(pipeline, users, 1, 6)
    applied(pipeline, ids)
    assert model.workers() == {name_of(owner)}  # every event, by the owner alone
    for u in users:
        assert model.asked[u] == list(range(1, 7))  # each once, in order
    assert "owned by shard0-" in standby.output()
    client = redis.Redis.from_url(pipeline.broker_url, decode_responses=True)
    assert str(client.hget(lease_key(QUEUE), "owner")).startswith(f"{owner.name}@")


def test_sigkill_of_the_owner_the_standby_takes_over_in_order(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    model = WhoAsked(delay=0.05)
    fake_openai.default_chat = model
    owner, standby = owner_and_standby(pipeline, fake_openai)
    users = users_on(0, 4, "kill")
    ids = publish(pipeline, users, 1, 15)
    deadline = time.monotonic() + 60
    while sum(map(len, model.asked.values())) < 12 and time.monotonic() < deadline:
        time.sleep(0.005)
    owner.kill()
    killed = time.monotonic()
    while "owner of memory.extract.0" not in standby.output():
        assert time.monotonic() - killed < LEASE + 10, standby.output()
        time.sleep(0.02)
    applied(pipeline, ids)
    assert model.workers() == {name_of(owner), name_of(standby)}
    for u in users:
        assert first_asks(model.asked[u]) == list(range(1, 16))
        # after the first ask by the standby, the owner asks nothing more
        by = model.by[u]
        if name_of(standby) in by:
            assert name_of(owner) not in by[by.index(name_of(standby)) :]


def first_asks(asked: list[int]) -> list[int]:
    seen: set[int] = set()
    return [n for n in asked if not (n in seen or seen.add(n))]  # type: ignore[func-returns-value]


def test_an_owner_paused_past_its_lease_consumes_and_acks_nothing_more(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    model = WhoAsked(delay=0.05)
    fake_openai.default_chat = model
    owner, standby = owner_and_standby(pipeline, fake_openai)
    users = users_on(0, 4, "stop")
    ids = publish(pipeline, users, 1, 15)
    deadline = time.monotonic() + 60
    while sum(map(len, model.asked.values())) < 8 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert owner.proc is not None
    owner.proc.send_signal(signal.SIGSTOP)
    while "owner of memory.extract.0" not in standby.output():
        time.sleep(0.02)
    stopped_asks = {u: len(a) for u, a in model.by.items()}
    client = redis.Redis.from_url(pipeline.broker_url)
    owner.proc.send_signal(signal.SIGCONT)
    owner.proc.wait(20)  # it ends itself: its lease is another's
    assert "lost the lease of memory.extract.0" in owner.output()
    applied(pipeline, ids)
    for u in users:
        later = model.by[u][stopped_asks.get(u, 0) :]
        assert name_of(owner) not in later, "the woken owner asked the model again"
        assert first_asks(model.asked[u]) == list(range(1, 16))
    assert client.hlen("unacked") == 0
    assert re.search(r"exiting without acking", owner.output())


def test_a_rolling_restart_under_traffic_loses_duplicates_and_reorders_nothing(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    model = WhoAsked(delay=0.02)
    fake_openai.default_chat = model
    first, second = owner_and_standby(pipeline, fake_openai, HANDOVER_LEASE)
    users = users_on(0, 4, "roll")
    ids: list[str] = []
    done = threading.Event()

    def traffic() -> None:
        with pipeline.producer() as producer:
            n = 0
            while not done.is_set() or n < 5:
                n += 1
                ids.extend(
                    producer.session_ended(("acme", "users", u), f"t-{u}", said(u, n))
                    for u in users
                )
                time.sleep(0.2)
            assert producer.flush(timeout=30)

    publisher = threading.Thread(target=traffic)
    publisher.start()
    try:
        # As a rolling update with a surge does it: a replacement starts (a standby),
        # then the owner gets SIGTERM and hands over to a standby: whichever standby
        # takes the lease (the old one or the replacement) owns it next, so each round
        # stops the owner of the moment, three owners in all.
        live = [first, second]
        for i in range(2):
            live += pipeline.workers.start_all(
                [
                    shard_worker(
                        pipeline,
                        fake_openai,
                        f"r{i}",
                        TULIP_SHARD_LEASE_SECONDS=str(HANDOVER_LEASE),
                    )
                ]
            )
            old = owner_now(pipeline, live)
            live.remove(old)
            old.stop(timeout=30)
            assert old.proc is not None and old.proc.returncode == 0, old.output()
    finally:
        done.set()
        publisher.join(60)
    applied(pipeline, ids)
    assert len({name for names in model.by.values() for name in names}) >= 3
    for u in users:
        assert model.asked[u] == list(range(1, len(model.asked[u]) + 1))  # each once, in order
        assert len(model.asked[u]) == len(ids) // len(users)
    assert "released the lease of memory.extract.0" in first.output() + second.output()

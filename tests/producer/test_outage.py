"""Broker outages: nothing lost, order kept, every call answered within a bounded time."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.producer.conftest import MakeProducer, RestartableRedis
from tests.producer.queues import by_key, rising, take_all
from tulip_producer.spool import Spool
from tulip_wire.events import namespace_key

ROOT = Path(__file__).resolve().parents[2]


def chat(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def test_broker_down_for_1000_events_then_all_delivered_once_in_order(
    restartable_redis: RestartableRedis, make_producer: MakeProducer, tenant: str
) -> None:
    broker = restartable_redis
    producer = make_producer(broker.url)
    keys = [(tenant, f"user-{k}") for k in range(10)]
    before = producer.session_ended(keys[0], "t", chat("before the outage"))

    broker.stop()
    ids, took = [], []
    for i in range(1000):
        start = time.monotonic()
        ids.append(producer.session_ended(keys[i % 10], "t", chat(f"m{i}"), {"i": i}))
        took.append(time.monotonic() - start)
    print(f"\noutage: slowest call {max(took) * 1000:.1f} ms, total {sum(took):.2f} s")
    assert len(set(ids)) == 1000 and all(len(i) == 32 for i in ids)
    assert producer.spooled == 1000
    assert not producer.flush(timeout=0.2)  # still down: flush reports it, nothing lost
    assert producer.spooled == 1000

    broker.start()  # same data directory: the sequence counters survive
    after = producer.session_ended(keys[0], "t", chat("after the restart"))
    assert producer.flush()
    assert producer.spooled == 0

    delivered = take_all(producer.settings)
    task_ids = [d.task_id for d in delivered]
    assert len(task_ids) == len(set(task_ids)) == 1002  # each once
    assert set(task_ids) == {before, after, *ids}
    per_key = by_key(delivered)
    for k, key in enumerate(keys):
        envs = per_key[namespace_key(key)]
        seqs = [e.seq or 0 for e in envs]
        assert seqs == sorted(set(seqs))  # strictly increasing in queue order
        spooled = [e.payload["metadata"]["i"] for e in envs if e.payload and e.payload["metadata"]]
        assert spooled == list(range(k, 1000, 10))  # call order
    first_key = [e.id for e in per_key[namespace_key(keys[0])]]
    assert first_key[0] == before and first_key[-1] == after  # nothing overtook the spool


SPOOLING_PROCESS = """
import json, sys
from pathlib import Path
from tulip_producer import Producer

broker, spool, tenant = sys.argv[1:4]
producer = Producer.from_urls(broker, spool_dir=Path(spool), extract_shards=4)
ids = [
    producer.session_ended((tenant, f"user-{i % 3}"), "t", [{"role": "user", "content": str(i)}])
    for i in range(30)
]
producer.close(timeout=1)
print(json.dumps({"ids": ids, "left": producer.spooled}))
"""


def test_a_new_process_on_the_spool_delivers_what_the_last_one_spooled(
    broker_url: str, make_producer: MakeProducer, tenant: str, tmp_path: Path
) -> None:
    spool_dir = tmp_path / "spool"
    dead_broker = f"unix://{tmp_path}/no-broker-here.sock"
    done = subprocess.run(
        [sys.executable, "-c", SPOOLING_PROCESS, dead_broker, str(spool_dir), tenant],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    closed = json.loads(done.stdout.splitlines()[-1])
    ids = closed["ids"]
    assert closed["left"] == 30  # Producer.spooled after close()
    assert "closing with 30 event(s) still spooled" in done.stderr
    spool = Spool(spool_dir)
    assert len(spool) == 30  # on disk after the process exited
    spool.close()

    producer = make_producer(broker_url, spool_dir=spool_dir)  # no flush(): the flusher's job
    _wait_until(lambda: producer.spooled == 0)
    delivered = take_all(producer.settings)
    assert sorted(d.task_id for d in delivered) == sorted(ids)
    for envs in by_key(delivered).values():
        assert len(envs) == 10 and rising([e.seq for e in envs])
    for key, envs in by_key(delivered).items():
        assert [e.id for e in envs] == [
            i for i, e in zip(ids, _keys(tenant), strict=True) if e == key
        ]


def _keys(tenant: str) -> Iterator[str]:
    return (namespace_key((tenant, f"user-{i % 3}")) for i in range(30))


def _wait_until(condition: Any, limit: float = 60.0) -> None:
    """Poll ``condition``; the limit only keeps a broken build from hanging."""
    end = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < end, "condition never became true"
        time.sleep(0.05)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP port that accepts connections (kernel backlog) and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(128)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


@pytest.mark.timeout(120)  # a hang guard, not a timing assertion
@pytest.mark.parametrize("silent", ["broker", "sequence redis", "amqp broker"])
def test_a_silent_server_costs_one_bounded_attempt_then_events_spool(
    silent_port: int, broker_url: str, make_producer: MakeProducer, tenant: str, silent: str
) -> None:
    dead = f"redis://127.0.0.1:{silent_port}/0"
    urls = {
        "broker": (dead, broker_url),
        "sequence redis": (broker_url, dead),
        "amqp broker": (f"amqp://guest:guest@127.0.0.1:{silent_port}//", broker_url),
    }[silent]
    producer = make_producer(urls[0], redis_url=urls[1], publish_timeout=0.3)
    ids = [producer.session_ended((tenant, "u"), "t", chat(str(i))) for i in range(20)]
    assert len(set(ids)) == 20
    assert producer.spooled == 20
    if silent == "sequence redis":  # no sequence number, no message: the broker got nothing
        assert take_all(producer.settings) == []

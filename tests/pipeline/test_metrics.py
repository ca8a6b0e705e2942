"""``tulip-memory metrics`` against a real broker, real workers and a real producer."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.pipeline.conftest import Pipeline
from tests.pipeline.test_faults import session, shard_of
from tests.pipeline.test_poison import sender, wait_for
from tests.support.workers import ROOT, worker_env
from tulip_ops.dev.flower import free_port
from tulip_producer import Producer
from tulip_wire.events import SESSION_ENDED, TASKS


@pytest.fixture
def metrics(pipeline: Pipeline, tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / "metrics.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tulip_ops.cli", "metrics", "--port", str(port)],
        cwd=ROOT,
        env=worker_env(**pipeline.env()),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_for("the metrics endpoint", lambda: scrape(url) is not None, timeout=30)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_queue_depth_is_a_stopped_shards_backlog_exactly_and_dead_letters_count(
    pipeline: Pipeline, metrics: str
) -> None:
    ns = ("metered", "users", "u1")
    stopped = shard_of(ns)
    running = 1 - stopped
    values = scrape(metrics)
    assert values is not None
    queues = {dict(labels)["queue"] for name, labels in values if name == "tulip_queue_depth"}
    assert queues == {
        "memory.extract.0",
        "memory.extract.1",
        "memory.checkpoint.0",
        "memory.checkpoint.1",
        "memory.summarize",
        "memory.reindex",
    }
    with pipeline.producer() as producer:
        for i in range(7):
            producer.session_ended(ns, "t", session(i, "red"))
        assert producer.flush(timeout=30)
    pipeline.start_shard(running)
    app = sender(pipeline.broker_url)
    try:
        queue = f"memory.extract.{running}"
        poison = uuid.uuid4().hex
        app.send_task(
            TASKS[SESSION_ENDED], args=[123], queue=queue, routing_key=queue, task_id=poison
        )
    finally:
        app.close()

    def dead_counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        values = scrape(metrics)
        key = ("tulip_dead_letters_total", (("reason_class", "malformed"),))
        return values if values and values.get(key) == 1 else None

    values = wait_for("the dead letter counted", dead_counted)
    assert values[("tulip_queue_depth", (("queue", f"memory.extract.{stopped}"),))] == 7
    assert values[("tulip_queue_depth", (("queue", f"memory.extract.{running}"),))] == 0
    assert values[("tulip_oldest_pending_seconds", (("queue", f"memory.extract.{stopped}"),))] > 0
    assert values[("tulip_dead_letters_total", (("reason_class", "model"),))] == 0
    assert values[("tulip_broker_up", ())] == 1
    assert values[("tulip_llm_inflight", ())] == 0


def test_a_producers_spool_depth_is_reported(pipeline: Pipeline, metrics: str) -> None:
    producer = Producer.from_urls(
        "redis://127.0.0.1:1/0",  # a broker that is down: every event is spooled
        pipeline.broker_url,  # sequence numbers and the report: a Redis that is up
        spool_dir=pipeline.spool,
        extract_shards=2,
        checkpoint_shards=2,
    )
    try:
        for i in range(3):
            producer.session_ended(("spooled", "u"), "t", session(i, "red"))
        assert producer.spooled == 3

        def reported() -> list[float] | None:
            values = scrape(metrics) or {}
            depths = [v for (name, _), v in values.items() if name == "tulip_producer_spool_depth"]
            return depths if 3 in depths else None

        assert 3 in wait_for("the spool depth reported", reported, timeout=30)
    finally:
        producer.close(timeout=0)


def test_outcomes_and_publish_to_applied_latency_are_counted_by_queue(
    pipeline: Pipeline, metrics: str
) -> None:
    ns = ("outcomes", "users", "u1")
    queue = f"memory.extract.{shard_of(ns)}"
    pipeline.start_shard(shard_of(ns))
    with pipeline.producer() as producer, pipeline.reader() as reader:
        ids = [producer.session_ended(ns, "t", session(i, "blue")) for i in range(3)]
        pipeline.wait_applied(reader, ids, "outcomes")

    def counted() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        values = scrape(metrics) or {}
        done = values.get(("tulip_events_total", (("outcome", "applied"), ("queue", queue))))
        return values if done == 3 else None

    values = wait_for("the outcomes counted", counted, timeout=30)
    assert values[("tulip_event_latency_seconds_count", (("queue", queue),))] == 3
    assert values[("tulip_event_latency_seconds_bucket", (("le", "+Inf"), ("queue", queue)))] == 3
    assert 0 < values[("tulip_event_latency_seconds_sum", (("queue", queue),))] < 3 * 120
    build = [labels for name, labels in values if name == "tulip_build_info"]
    assert len(build) == 1 and dict(build[0])["version"] not in ("", "unknown")

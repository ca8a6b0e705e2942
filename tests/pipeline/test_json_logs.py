"""A real shard worker with TULIP_LOG_FORMAT=json: its outcome line is pure JSON."""

from __future__ import annotations

import json
import time

from tests.pipeline.conftest import Pipeline
from tulip_memory.messages import Message, Role


def test_a_worker_logs_outcomes_as_json_lines(pipeline: Pipeline) -> None:
    pipeline.start_shards(TULIP_LOG_FORMAT="json")
    with pipeline.producer() as producer, pipeline.reader() as reader:
        event_id = producer.session_ended(
            ("logs", "u1"), "t", [Message(role=Role.USER, content="My name is Ada.")]
        )
        pipeline.wait_applied(reader, [event_id], "logs")
    deadline = time.monotonic() + 60
    while True:
        output = "".join(w.output() for w in pipeline.workers.started)
        # Celery's own "Task ... received" lines name the id too, in Celery's format.
        mine = [line for line in output.splitlines() if event_id in line and "outcome" in line]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert mine, output[-2000:]
    for line in mine:  # the whole line is one object: no Celery prefix around it
        record = json.loads(line)
        assert record["logger"] == "tulip.events" and record["event_id"] == event_id
        assert record["outcome"] == "applied" and record["level"] == "INFO"

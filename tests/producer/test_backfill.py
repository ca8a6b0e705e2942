"""The import's pieces on a real broker: the shard backlog it paces by, ids that make a
second import the same events, lines it refuses, and where a run resumes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.producer.conftest import MakeProducer
from tests.producer.queues import take_all
from tulip_ops.backfill import (
    LineError,
    Pacer,
    StateFile,
    Summary,
    parse_line,
    run,
    session_event,
)

NS = ("acme", "users", "u1")


def conversation(sessions: int, ns: tuple[str, ...] = NS) -> str:
    return json.dumps(
        {
            "namespace": list(ns),
            "thread_id": "t1",
            "sessions": [
                {
                    "timestamp": f"2023-05-0{s}T10:00:00Z",
                    "messages": [{"role": "user", "content": f"hi {s}", "id": f"m{s}"}],
                }
                for s in range(1, sessions + 1)
            ],
        }
    )


def test_the_pacer_waits_for_room_on_the_events_shard_queue(
    broker_url: str, make_producer: MakeProducer
) -> None:
    producer = make_producer(broker_url)
    conv = parse_line(conversation(3))
    for k in range(2):
        producer.publish_session(session_event(conv, k, ts=1.0))
    assert producer.backlog(NS) == 2
    assert producer.backlog(("elsewhere", "x")) in (0, 2)  # another shard, or the same
    taken = []

    def sleep(seconds: float) -> None:  # each poll of the full queue sleeps once
        sleeps.append(seconds)
        if len(sleeps) == 3:
            taken.extend(take_all(producer.settings))  # a worker took them

    sleeps: list[float] = []
    Pacer(producer, max_backlog=2, sleep=sleep).wait(NS)
    assert len(sleeps) == 3 and len(taken) == 2
    Pacer(producer, max_backlog=2, sleep=sleep).wait(NS)  # room: no wait
    assert len(sleeps) == 3


def test_event_ids_follow_the_history_not_the_run() -> None:
    conv = parse_line(conversation(2))
    first, again = session_event(conv, 0, ts=1.0), session_event(conv, 0, ts=99.0)
    assert first.id == again.id and len(first.id) == 32
    assert session_event(conv, 1, ts=1.0).id != first.id
    other = parse_line(conversation(2, ("acme", "users", "u2")))
    assert session_event(other, 0, ts=1.0).id != first.id
    assert first.payload is not None
    assert first.payload["metadata"]["timestamp"] == "2023-05-01T10:00:00Z"
    assert first.payload["messages"][0]["metadata"] == {"id": "m1"}


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1]", "JSON object"),
        ('{"namespace": [], "thread_id": "t", "sessions": []}', "namespace"),
        ('{"namespace": ["a"], "thread_id": "", "sessions": []}', "thread_id"),
        ('{"namespace": ["a"], "thread_id": "t", "sessions": [{"messages": 3}]}', "messages"),
    ],
)
def test_lines_that_are_not_conversations(line: str, reason: str) -> None:
    with pytest.raises(LineError, match=reason):
        parse_line(line)


def test_a_session_that_is_not_valid_is_refused() -> None:
    bad_time = conversation(1).replace("2023-05-01T10:00:00Z", "last tuesday")
    with pytest.raises(LineError, match="sessions\\[0\\]"):
        session_event(parse_line(bad_time), 0, ts=1.0)
    bad_role = conversation(1).replace('"user"', '"wizard"')
    with pytest.raises(LineError, match="not a message"):
        session_event(parse_line(bad_role), 0, ts=1.0)


def test_a_run_resumes_where_it_stopped_and_skips_bad_lines(
    broker_url: str, make_producer: MakeProducer, tmp_path: Path
) -> None:
    source = tmp_path / "history.jsonl"
    source.write_text("\n".join([conversation(2), "garbage", conversation(3, ("b", "u"))]) + "\n")
    producer = make_producer(broker_url)
    state = StateFile(tmp_path / "state", source)

    class Stop(Exception):
        pass

    def stop_after_one(position: object, summary: Summary) -> None:
        if summary.events == 1:
            raise Stop  # as Ctrl-C would

    with pytest.raises(Stop):
        run(source, producer, state, Pacer(producer, max_backlog=100), stop_after_one)
    first = take_all(producer.settings)
    summary = run(source, producer, state, Pacer(producer, max_backlog=100))
    second = take_all(producer.settings)
    assert len(first) == 1 and len(second) == 4 and summary.events == 4
    assert summary.skipped_events == 1 and summary.conversations == 2
    expected = [
        session_event(parse_line(text), k, ts=0).id
        for text, n in ((conversation(2), 2), (conversation(3, ("b", "u")), 3))
        for k in range(n)
    ]
    assert sorted(d.envelope.id for d in first + second) == sorted(expected)  # each once
    assert [n for n, _ in summary.bad_lines] == [2]
    # Done: a third run publishes nothing.
    assert run(source, producer, state, Pacer(producer, max_backlog=100)).events == 0
    # Another file under the same state is refused.
    other = tmp_path / "other.jsonl"
    other.write_text(conversation(1) + "\n")
    with pytest.raises(LineError, match="another input file"):
        StateFile(tmp_path / "state", other).load()

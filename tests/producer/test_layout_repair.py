"""A malformed shard layout record: producers hold the role's events in their spool and
say so once, naming the record; ``tulip-memory reshard --repair`` (the CLI's entry point,
against the test Redis) rewrites it as the configured count once no queue of the role,
of any layout, holds a message, and the spool delivers in order."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterator

import pytest
import redis

from tests.producer.conftest import SHARDS, MakeProducer
from tulip_memory.messages import Message, Role
from tulip_ops.cli import main
from tulip_wire.events import decode, namespace_key
from tulip_wire.routing import ShardRouter
from tulip_wire.shardlayout import ShardLayout, layout_key
from tulip_wire.topology import CHECKPOINT_QUEUE_PREFIX, EXTRACT_QUEUE_PREFIX

KEY = layout_key(EXTRACT_QUEUE_PREFIX)
GARBAGE = "\x1b[2J six shards, trust me"
NS = ("acme", "users", "repair")
SAID = [Message(role=Role.USER, content="my favourite colour is teal")]
QUEUE = ShardRouter(EXTRACT_QUEUE_PREFIX, SHARDS).queue(namespace_key(NS))


@pytest.fixture
def client(broker_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(broker_url)

    def clean() -> None:
        for pattern in ("memory.extract.*", "memory.checkpoint.*", "tulip:shards:*"):
            keys = list(c.scan_iter(match=pattern))
            if keys:
                c.delete(*keys)

    clean()
    yield c
    clean()
    c.close()


@pytest.fixture
def reshard(
    broker_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Iterator[Callable[..., tuple[int, str]]]:
    """``tulip-memory reshard ARGS`` on the test broker: its exit code and output."""
    monkeypatch.setenv("TULIP_BROKER_URL", broker_url)
    monkeypatch.setenv("TULIP_EXTRACT_SHARDS", str(SHARDS))
    monkeypatch.delenv("TULIP_REDIS_URL", raising=False)

    def run(*argv: str) -> tuple[int, str]:
        capsys.readouterr()
        code = main(["reshard", *argv, "--grace", "0.05"])
        out = capsys.readouterr()
        return code, out.out + out.err

    yield run


def test_the_producer_says_once_which_record_is_malformed_and_how_to_repair_it(
    broker_url: str,
    client: redis.Redis,
    make_producer: MakeProducer,
    caplog: pytest.LogCaptureFixture,
    reshard: Callable[..., tuple[int, str]],
) -> None:
    producer = make_producer(broker_url)
    client.set(KEY, GARBAGE)
    with caplog.at_level(logging.DEBUG, "tulip_producer"):
        ids = [producer.session_ended(NS, "t", SAID) for _ in range(3)]
        assert not producer.flush(timeout=1.0)  # the flusher's retries: told already
    assert producer.spooled == 3 and client.llen(QUEUE) == 0
    told = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(told) == 1, [r.getMessage() for r in told]
    assert told[0].levelno == logging.ERROR
    said = told[0].getMessage()
    assert f"malformed shard layout record at {KEY}" in said
    assert "tulip-memory reshard --repair" in said and "\x1b" not in said

    code, output = reshard("--repair", "--timeout", "10")
    assert code == 0, output
    assert "\x1b" not in output and f"repaired, {KEY} = {SHARDS} shards" in output
    assert "memory.checkpoint: the layout record is fine (no record)" in output
    assert client.get(KEY) == str(SHARDS).encode()
    assert producer.flush(timeout=10)
    assert [decode(m).id for m in queued_envelopes(client)] == ids


def test_the_repair_waits_for_every_queue_of_the_role_to_empty(
    client: redis.Redis, reshard: Callable[..., tuple[int, str]]
) -> None:
    """A message on a queue of some other layout (shard 7 of 8, say): whatever layout
    was in use may be mid-drain, so the record stays as it is."""
    client.set(KEY, GARBAGE)
    client.lpush("memory.extract.7", b"an old layout's message")
    code, output = reshard("--repair", "--extract", "6", "--timeout", "0.5")
    assert code == 1, output
    assert "1 message(s) left on memory.extract.7" in output and "not repaired" in output
    assert client.get(KEY) == GARBAGE.encode()

    client.delete("memory.extract.7")
    code, output = reshard("--repair", "--extract", "6", "--timeout", "10")
    assert code == 0, output
    assert client.get(KEY) == b"6"


def test_a_record_that_is_fine_or_draining_is_not_repaired_and_a_reshard_points_to_repair(
    client: redis.Redis, reshard: Callable[..., tuple[int, str]]
) -> None:
    client.set(KEY, ShardLayout(6, SHARDS).encode())
    code, output = reshard("--repair", "--extract", "6", "--timeout", "1")
    assert code == 1 and "run `tulip-memory reshard --extract 6` to finish it" in output
    assert client.get(KEY) == b"drain 4 6"

    client.set(layout_key(CHECKPOINT_QUEUE_PREFIX), "2")
    code, output = reshard("--repair", "--checkpoint", "3", "--timeout", "1")
    assert code == 0 and "the layout record is fine (2 shards); nothing to repair" in output
    assert client.get(layout_key(CHECKPOINT_QUEUE_PREFIX)) == b"2"

    client.set(KEY, GARBAGE)
    code, output = reshard("--extract", "6", "--timeout", "1")
    assert code == 1
    assert f"malformed shard layout record at {KEY}" in output
    assert "run `tulip-memory reshard --repair` first" in output
    assert client.get(KEY) == GARBAGE.encode()


def queued_envelopes(client: redis.Redis) -> list[str]:
    """The envelopes on the namespace's queue, oldest first."""
    out = []
    for raw in reversed(client.lrange(QUEUE, 0, -1)):
        message = json.loads(raw)
        body = message["body"]
        if message["properties"].get("body_encoding") == "base64":
            body = base64.b64decode(body).decode()
        out.append(json.loads(body)[0][0])
    return out

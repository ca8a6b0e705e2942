"""An erase reaches every store, in order with the subject's events (real workers).

A unique marker is planted in a tenant's sessions (memories and turns), checkpoints, a
dead letter and a spooled event; more of the tenant's events are published before and
after its erase, and the worker running the erase is SIGKILLed mid-way. Once the erase
is ``applied``, every table (read as the administrator, row-level security bypassed),
every object of the checkpoint and claim-check stores, every Redis key and value and
the spool's files are scanned: the marker is nowhere, the events after the erase are
applied, and another tenant's identical marker is untouched.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg

from tests.pipeline.conftest import SHARDS, Pipeline
from tests.pipeline.test_poison import sender
from tests.support.workers import worker_env
from tulip_memory.messages import Message, Role
from tulip_memory.state import AgentState
from tulip_ops.dev.embedded import run_async
from tulip_producer import Producer
from tulip_producer.reader import Reader
from tulip_wire.endpoints import redis_client
from tulip_wire.events import CHECKPOINT_SAVED, TASKS, encode, namespace_key, session_ended
from tulip_wire.routing import ShardRouter


def _talk(marker: str, turns: int) -> list[Message]:
    out = []
    for i in range(turns):
        out.append(
            Message(role=Role.USER, content=f"My secret {i} is {marker}.", metadata={"id": f"u{i}"})
        )
        out.append(
            Message(role=Role.ASSISTANT, content=f"Noted, {marker}.", metadata={"id": f"a{i}"})
        )
    return out


def _state(marker: str) -> AgentState:
    return AgentState(messages=(Message(role=Role.USER, content=f"I live at {marker}."),))


def _extract_shard(key: str) -> int:
    return ShardRouter("memory.extract", SHARDS).shard(key)


def _zlib_texts(data: bytes) -> Iterator[bytes]:
    """``data`` and whatever zlib streams inside it decompress to (checkpoints are
    zlib sections)."""
    yield data
    for i in range(len(data) - 1):
        if data[i] == 0x78 and data[i + 1] in (0x01, 0x5E, 0x9C, 0xDA):
            try:
                yield zlib.decompressobj().decompress(data[i:])
            except zlib.error:
                continue


def _files_holding(root: Path, needles: list[bytes]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and any(n in t for t in _zlib_texts(path.read_bytes()) for n in needles):
            found.append(str(path.relative_to(root)))
    return found


def _redis_texts(client: Any) -> Iterator[tuple[bytes, bytes]]:
    """Every key and every value of the database (kombu's base64 bodies decoded)."""
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        values: list[bytes] = []
        if kind == b"string":
            values = [client.get(key) or b""]
        elif kind == b"list":
            values = list(client.lrange(key, 0, -1))
        elif kind == b"hash":
            values = [v for kv in client.hgetall(key).items() for v in kv]
        elif kind == b"set":
            values = list(client.smembers(key))
        elif kind == b"zset":
            values = [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
        for v in [key, *values]:
            yield key, v
            yield key, _kombu_body(v)


def _kombu_body(raw: bytes) -> bytes:
    try:
        message = json.loads(raw)
        if isinstance(message, list):  # an unacked entry: [message, exchange, routing key]
            message = message[0]
        return base64.b64decode(message["body"])
    except Exception:
        return b""


def _redis_holding(url: str, needle: bytes) -> list[bytes]:
    client = redis_client(url)
    try:
        return sorted({k for k, v in _redis_texts(client) if needle in v})
    finally:
        client.close()


async def _rows_holding(admin_dsn: str, needle: str) -> list[str]:
    """Every table of every schema but the catalogs', as the administrator (who
    bypasses row-level security): the tables whose rows' text holds ``needle``
    (bytea as hex too)."""
    conn = await asyncpg.connect(admin_dsn)
    try:
        tables = await conn.fetch(
            """SELECT format('%I.%I', table_schema, table_name) AS t FROM information_schema.tables
               WHERE table_type = 'BASE TABLE'
                 AND table_schema NOT IN ('pg_catalog', 'information_schema')"""
        )
        hexed = needle.encode().hex()
        found = []
        for r in tables:
            hit = await conn.fetchval(
                f"SELECT count(*) FROM {r['t']} x WHERE x::text LIKE $1 OR x::text LIKE $2",
                f"%{needle}%",
                f"%{hexed}%",
            )
            if hit:
                found.append(r["t"])
        return found
    finally:
        await conn.close()


def _wait(reader: Reader, event_id: str, tenant: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = reader.status(event_id, tenant=tenant)
        if status.state in ("applied", "superseded", "dead"):
            return status
        time.sleep(0.1)
    raise AssertionError(f"event {event_id} not done in {timeout}s")


def _dead_letter(pipeline: Pipeline, tenant: str, marker: str) -> str:
    """A session of ``tenant`` sent to a checkpoint queue by a broker client of no
    producer's: its worker dead-letters it under the tenant, the body (the marker
    with it) kept whole."""
    env = session_ended((tenant, "users", "maya"), "thread-1", _talk(marker, 1), ts=time.time())
    env = env.with_seq(1)
    app = sender(pipeline.broker_url)
    queue = "memory.checkpoint.0"
    try:
        app.send_task(
            TASKS[CHECKPOINT_SAVED], args=[encode(env)], queue=queue, routing_key=queue,
            task_id=env.id,
        )  # fmt: skip
    finally:
        app.close()
    return env.id


def _spooled(pipeline: Pipeline, spool: Path, ns: tuple[str, ...], marker: str) -> str:
    """A session a producer had to spool (its broker unreachable), not yet delivered."""
    away = Producer.from_urls(
        "redis://127.0.0.1:9/0", "redis://127.0.0.1:9/0", spool_dir=spool,
        extract_shards=SHARDS, checkpoint_shards=SHARDS, publish_timeout=0.2,
    )  # fmt: skip
    event_id = away.session_ended(ns, "thread-2", _talk(marker, 2))
    away.close(timeout=0.1)
    assert away.spooled == 1
    return event_id


def test_forget_tenant_reaches_every_store_in_order_through_a_sigkill(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    marker = f"zq{uuid.uuid4().hex}"
    acme, globex = f"acme{uuid.uuid4().hex[:6]}", f"globex{uuid.uuid4().hex[:6]}"
    maya, bob = (acme, "users", "maya"), (acme, "users", "bob")
    other = (globex, "users", "maya")
    erase_shard = _extract_shard(namespace_key((acme,)))
    # Batches of one row, resting 20x a batch: the erase takes long enough to be killed.
    # Bodies over 2 KB travel by claim check: the big session's is an object to erase.
    slow = {"TULIP_ERASE_BATCH": "1", "TULIP_ERASE_PACE": "20", "TULIP_MAX_EVENT_BYTES": "2048"}
    pipeline.workers.start_all(
        [pipeline.shard(k, "extract", **slow) for k in range(SHARDS)]
        + [pipeline.shard(k, "checkpoint", **slow) for k in range(SHARDS)]
    )
    spool = tmp_path / "late-spool"
    late = _spooled(pipeline, spool, maya, marker)
    producer = Producer.from_urls(
        pipeline.broker_url, pipeline.broker_url, spool_dir=pipeline.spool,
        extract_shards=SHARDS, checkpoint_shards=SHARDS, max_event_bytes=2048,
        claim_check_url=f"file://{checkpoints_dir(pipeline)}/claims",
    )  # fmt: skip
    with producer, pipeline.reader() as reader:
        before = [
            producer.session_ended(maya, "thread-1", _talk(marker, 20)),
            producer.session_ended(bob, "thread-3", _talk(marker, 3)),
            producer.session_ended(other, "thread-1", _talk(marker, 3)),
            producer.checkpoint_saved("thread-1", _state(marker), tenant=acme).event_id,
            producer.checkpoint_saved("thread-1", _state(marker + " 2"), tenant=acme).event_id,
            producer.checkpoint_saved("thread-1", _state(marker), tenant=globex).event_id,
        ]
        letter = _dead_letter(pipeline, acme, marker)
        for event_id in before[:2] + before[3:5]:
            assert _wait(reader, event_id, acme).state == "applied", event_id
        for event_id in (before[2], before[5]):
            assert _wait(reader, event_id, globex).state == "applied"
        assert _wait(reader, letter, acme).state == "dead"
        assert run_async(_rows_holding(pipeline.admin_url, marker))  # planted

        erase = producer.forget_tenant(acme)
        after_session = producer.session_ended(maya, "thread-1", [
            Message(role=Role.USER, content="I moved to Porto.", metadata={"id": "n1"})
        ])  # fmt: skip
        after_save = producer.checkpoint_saved("thread-1", _state("Porto"), tenant=acme).event_id

        # SIGKILL the worker running the erase once it has erased some of it.
        deadline = time.monotonic() + 60
        while not (reader.status(erase, tenant=acme).erased or {}).get("turns"):
            assert time.monotonic() < deadline, "the erase never started"
            time.sleep(0.05)
        victim = next(w for w in pipeline.workers.started if w.name == f"extract-{erase_shard}")
        victim.kill()
        assert reader.status(erase, tenant=acme).state == "pending"
        pipeline.start_shard(erase_shard, "extract", TULIP_ERASE_BATCH="500")

        receipt = _wait(reader, erase, acme, timeout=120)
        assert receipt.state == "applied"
        assert receipt.erased is not None and receipt.erased_at is not None
        assert receipt.erased["memories"] >= 1 and receipt.erased["turns"] >= 23
        assert receipt.erased["checkpoints"] >= 1 and receipt.erased["dead_letters"] == 1
        # The events after the erase are applied.
        assert _wait(reader, after_session, acme).state == "applied"
        assert _wait(reader, after_save, acme).state == "applied"
        state = reader.load("thread-1", tenant=acme)
        assert state is not None and "Porto" in state.messages[0].content
        # The spooled session, delivered after the erase, is dropped.
        with Producer.from_urls(
            pipeline.broker_url, pipeline.broker_url, spool_dir=spool,
            extract_shards=SHARDS, checkpoint_shards=SHARDS,
        ) as deliverer:  # fmt: skip
            assert deliverer.flush(timeout=30)
        assert _wait(reader, late, acme).state == "superseded"
        assert not [m for m in reader.recall(maya, marker, limit=50) if marker in m.content]
        claims = checkpoints_dir(pipeline) / "claims"
        assert claims.exists()  # the big session went by claim check

    needle = marker.encode()
    tables = run_async(_rows_holding(pipeline.admin_url, marker))
    checkpoints = checkpoints_dir(pipeline)
    files = _files_holding(checkpoints, [needle])
    # Only the other tenant's copies remain, wherever they are.
    assert all(
        globex.encode() in (checkpoints / f).read_bytes() or f"t.{globex}" in f for f in files
    ), files
    assert not [f for f in files if f"t.{acme}" in f]
    assert _redis_holding(pipeline.broker_url, needle) == []
    assert not _files_holding(spool, [needle])
    # The other tenant's marker is untouched: its memories, turns and thread.
    with pipeline.reader() as reader:
        assert reader.recall(other, marker, limit=5)
        theirs = reader.load("thread-1", tenant=globex)
        assert theirs is not None and marker in theirs.messages[0].content
    # Only the other tenant's rows hold it (memories, turns, their lexical postings).
    assert tables and all(t.startswith(f"public.{pipeline.table}") for t in tables), tables
    run_async(_only_tenant(pipeline, tables, marker, globex))


def checkpoints_dir(pipeline: Pipeline) -> Path:
    return pipeline.spool.parent / "checkpoints"


async def _only_tenant(pipeline: Pipeline, tables: list[str], marker: str, tenant: str) -> None:
    """Rows holding ``marker`` in ``tables`` are all ``tenant``'s."""
    conn = await asyncpg.connect(pipeline.admin_url)
    try:
        for t in tables:
            owners = await conn.fetch(
                f"SELECT DISTINCT tenant FROM {t} x WHERE x::text LIKE $1", f"%{marker}%"
            )
            assert {r["tenant"] for r in owners} == {tenant}, (t, owners)
    finally:
        await conn.close()


def _cli(pipeline: Pipeline, *args: str) -> subprocess.CompletedProcess[str]:
    env = worker_env(**pipeline.env())
    return subprocess.run(
        [sys.executable, "-m", "tulip_ops.cli", "forget", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_forget_messages_namespace_and_thread_in_order_and_by_the_cli(
    pipeline: Pipeline,
) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    maya = (tenant, "users", "maya")
    marker = f"zq{uuid.uuid4().hex}"
    k = _extract_shard(namespace_key(maya))
    thread_shard = ShardRouter("memory.checkpoint", SHARDS).shard(f"{tenant}\x1fthread-x")
    pipeline.workers.start_all(
        [pipeline.shard(k, "extract"), pipeline.shard(thread_shard, "checkpoint")]
    )
    with pipeline.producer() as producer, pipeline.reader() as reader:
        first = producer.session_ended(maya, "thread-1", _talk(marker, 3))
        saved = producer.checkpoint_saved("thread-x", _state(marker), tenant=tenant).event_id
        assert _wait(reader, first, tenant).state == "applied"
        assert _wait(reader, saved, tenant).state == "applied"

        dry = _cli(pipeline, "--tenant", tenant, "--namespace", "users", "maya",
                   "--messages", "u0", "--dry-run")  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        assert "turns          1" in dry.stdout, dry.stdout
        erase = producer.forget_messages(maya, ["u0"])
        receipt = _wait(reader, erase, tenant)
        assert receipt.state == "applied" and (receipt.erased or {}).get("turns") == 1, receipt
        said = [h.text for h in reader.recall_turns(maya, marker, top_k=10)]
        assert said and not any("secret 0" in t for t in said), said

        thread = _cli(pipeline, "--tenant", tenant, "--thread", "thread-x")
        assert thread.returncode == 0, thread.stderr
        assert "checkpoints" in thread.stdout and "applied" in thread.stdout, thread.stdout
        assert reader.load("thread-x", tenant=tenant) is None

        # Published before the erase: applied, then erased. After it: applied.
        before = producer.session_ended(maya, "thread-1", _talk(marker, 1))
        erase = producer.forget(maya)
        after = producer.session_ended(maya, "thread-1", [
            Message(role=Role.USER, content="I moved to Porto.", metadata={"id": "n1"}),
            Message(role=Role.ASSISTANT, content="Enjoy Porto.", metadata={"id": "n2"}),
        ])  # fmt: skip
        assert _wait(reader, before, tenant).state == "applied"
        assert (_wait(reader, erase, tenant).erased or {}).get("turns", 0) >= 3
        assert _wait(reader, after, tenant).state == "applied"
        left = [h.text for h in reader.recall_turns(maya, "Porto secret", top_k=10)]
        assert len(left) == 1 and "Porto" in left[0] and marker not in left[0], left
    assert run_async(_rows_holding(pipeline.admin_url, marker)) == []

"""``tulip-memory import`` with real shard workers: killed (SIGKILL), interrupted
(Ctrl-C) and resumed, every event applied exactly once and in order per namespace,
while live events of another namespace keep being applied."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg

from tests.pipeline.conftest import Pipeline
from tests.support.workers import ROOT, worker_env
from tulip_memory.messages import Message, Role
from tulip_memory.times import iso
from tulip_ops.backfill import parse_line, session_event
from tulip_ops.dev.embedded import run_async
from tulip_wire.events import namespace_key

# 48 events at 8 a second: the state file is saved once a second, so when it first says
# 14 (the Ctrl-C mark) the run may be up to 8 further on, and still has 26 or more to go.
NAMESPACES = [(f"acme{i % 2}", "users", f"u{i}") for i in range(8)]
SESSIONS = 6
DAY = 86_400.0


def history(path: Path) -> list[str]:
    """One conversation per namespace; returns every event id in file order."""
    lines = []
    for i, ns in enumerate(NAMESPACES):
        sessions = [
            {
                "timestamp": 1_683_000_000 + s * DAY,
                "messages": [
                    {"role": "user", "content": f"My lucky number is {s}.", "id": f"{i}-{s}-q"},
                    {"role": "assistant", "content": f"Noted, {s}.", "id": f"{i}-{s}-a"},
                ],
            }
            for s in range(1, SESSIONS + 1)
        ]
        lines.append(
            json.dumps({"namespace": list(ns), "thread_id": f"t{i}", "sessions": sessions})
        )
    lines.append('{"namespace": "not a list"}')  # reported and skipped
    path.write_text("\n".join(lines) + "\n")
    ids = []
    for text in lines:
        try:
            conv = parse_line(text)
        except ValueError:
            continue
        ids += [session_event(conv, k, ts=0.0).id for k in range(len(conv.sessions))]
    return ids


def start_import(pipeline: Pipeline, path: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = worker_env(**pipeline.env(TULIP_SPOOL_DIR=str(path.parent / "import-spool")))
    return subprocess.Popen(
        [sys.executable, "-m", "tulip_ops.cli", "import", str(path), "--rate", "8", *extra],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def published(state: Path) -> int:
    try:
        return int(json.loads(state.read_text())["events"])
    except (FileNotFoundError, ValueError, KeyError):
        return 0


def stop_when(proc: subprocess.Popen[bytes], state: Path, events: int, sig: int) -> int:
    deadline = time.monotonic() + 120
    while published(state) < events and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    return proc.wait(60)


@contextmanager
def live_traffic(pipeline: Pipeline) -> Iterator[list[str]]:
    """Live events of their own namespace, two a second, while the block runs (below what
    the workers apply: the import yields to live traffic, so live events arriving faster
    than the shard applies them would hold it back for as long as they keep coming)."""
    ids: list[str] = []
    stop = threading.Event()

    def publish() -> None:
        with pipeline.producer() as producer:
            n = 0
            while not stop.is_set():
                n += 1
                said = [Message(role=Role.USER, content=f"My lucky number is {n}.")]
                ids.append(producer.session_ended(("live", "users", "u"), "live", said))
                stop.wait(0.5)
            assert producer.flush(timeout=30)

    thread = threading.Thread(target=publish)
    thread.start()
    try:
        yield ids
    finally:
        stop.set()
        thread.join(60)


async def ledger(pipeline: Pipeline, key: str) -> list[str]:
    """The applied event ids of ``key``, in the order they were applied."""
    conn = await asyncpg.connect(pipeline.admin_url)
    try:
        rows = await conn.fetch(
            "SELECT event_id, seq FROM tulip_event_ledger"
            " WHERE key = $1 AND status = 'applied' ORDER BY created_at, seq",
            key,
        )
    finally:
        await conn.close()
    assert [r["seq"] for r in rows] == sorted(r["seq"] for r in rows)  # applied in seq order
    return [r["event_id"] for r in rows]


def test_an_import_killed_and_interrupted_applies_every_event_once_in_order(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    path = tmp_path / "history.jsonl"
    ids = history(path)
    state = tmp_path / "history.jsonl.import-state"
    pipeline.start_shards()
    with live_traffic(pipeline) as live:
        assert stop_when(start_import(pipeline, path), state, 6, signal.SIGKILL) == -9
        assert stop_when(start_import(pipeline, path), state, 14, signal.SIGINT) == 130
        done = start_import(pipeline, path)
        out, err = done.communicate(timeout=300)
        assert done.returncode == 1, err  # the bad line
        bad = f"line {len(NAMESPACES) + 1}: namespace must be a non-empty list of strings"
        assert bad in out.decode()
    with pipeline.reader() as reader:
        for i, ns in enumerate(NAMESPACES):  # status answers per tenant
            pipeline.wait_applied(reader, ids[i * SESSIONS : (i + 1) * SESSIONS], ns[0])
        pipeline.wait_applied(reader, live, "live")
        for i, ns in enumerate(NAMESPACES):
            mine = ids[i * SESSIONS : (i + 1) * SESSIONS]
            assert run_async(ledger(pipeline, namespace_key(ns))) == mine
            turns = reader.recall_turns(ns, "lucky number", top_k=50)
            assert len(turns) == SESSIONS  # one turn per session, none twice
            (memory,) = reader.recall(ns, "lucky number")
            assert memory.content == f"The user's lucky number is {SESSIONS}."
            assert memory.metadata["source_ids"] == [f"{i}-{SESSIONS}-q"]
            assert memory.metadata["observed_at"] == iso(1_683_000_000 + SESSIONS * DAY)
        assert run_async(ledger(pipeline, namespace_key(("live", "users", "u")))) == live
    # Once done, running it again publishes nothing.
    again = start_import(pipeline, path)
    out, _ = again.communicate(timeout=120)
    assert "0 events" in out.decode()

"""Spool: a durable FIFO, safe across threads and processes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

from tulip_producer.spool import DB_FILE, Spool

ROOT = Path(__file__).resolve().parents[2]


def test_fifo_peek_remove_len(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    assert len(spool) == 0 and not spool and spool.peek() == []
    ids = [spool.append(f"e{i}") for i in range(5)]
    assert ids == sorted(ids) and len(spool) == 5 and spool
    head = spool.peek(3)
    assert [r.envelope for r in head] == ["e0", "e1", "e2"]
    assert [r.id for r in head] == ids[:3] and all(r.enqueued_at > 0 for r in head)
    spool.remove(head[0].id)
    spool.remove(head[0].id)  # removing twice is harmless
    assert [r.envelope for r in spool.peek()] == ["e1", "e2", "e3", "e4"]
    spool.close()


def test_rows_survive_a_reopen_and_ids_are_never_reused(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    first = spool.append("a")
    spool.append("b")
    spool.remove(first)
    spool.close()
    spool = Spool(tmp_path)
    assert [r.envelope for r in spool.peek()] == ["b"]
    for row in spool.peek():
        spool.remove(row.id)
    assert spool.append("c") > first + 1  # autoincrement: a later row sorts later
    spool.close()


def test_wal_mode_on_disk(tmp_path: Path) -> None:
    Spool(tmp_path).close()
    with sqlite3.connect(tmp_path / DB_FILE) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_threads_append_concurrently_in_their_own_order(tmp_path: Path) -> None:
    spool = Spool(tmp_path)

    def append(t: int) -> None:
        for i in range(100):
            spool.append(f"{t}:{i}")

    threads = [threading.Thread(target=append, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows = spool.peek(10_000)
    assert len(rows) == 800 == len(spool)
    for t in range(8):
        mine = [int(r.envelope.split(":")[1]) for r in rows if r.envelope.startswith(f"{t}:")]
        assert mine == list(range(100))
    spool.close()


def test_processes_share_a_spool_directory(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from tulip_producer.spool import Spool\n"
        "s = Spool(Path(sys.argv[1]))\n"
        "for i in range(200): s.append(f'{sys.argv[2]}:{i}')\n"
        "s.close()\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path), name], cwd=ROOT)
        for name in ("p", "q")
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    spool = Spool(tmp_path)
    rows = spool.peek(1000)
    for name in ("p", "q"):
        mine = [int(r.envelope.split(":")[1]) for r in rows if r.envelope.startswith(f"{name}:")]
        assert mine == list(range(200))
    spool.close()


def test_only_one_drainer_at_a_time(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    with spool.draining() as first:
        with spool.draining() as second:
            assert first and not second
        other = Spool(tmp_path)  # another handle (as another process would have)
        with other.draining() as third:
            assert not third
        other.close()
    with spool.draining() as again:
        assert again
    spool.close()

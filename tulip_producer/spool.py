"""A durable local FIFO for events the broker could not take yet.

One SQLite file in the spool directory, in WAL mode with ``synchronous=FULL``: an
append has reached the disk when it returns, so a spooled event survives a crash of
the process or the machine. Rows come back in append order (autoincrement ids are
never reused). Threads share one connection behind a lock; processes sharing the
directory are kept apart by SQLite's own file locking, and :meth:`Spool.draining`
lets only one of them drain at a time. Spooled events are conversations: the
directory is 0700 and its files 0600 (tightened when an older version left them open).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tulip_memory.private import private_dir, private_file

DB_FILE = "spool.sqlite3"
LOCK_FILE = "spool.drain.lock"
_FILES = (DB_FILE, f"{DB_FILE}-wal", f"{DB_FILE}-shm", LOCK_FILE)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS spool (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    envelope TEXT NOT NULL,
    enqueued_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS spool_rejected (
    id INTEGER PRIMARY KEY,
    envelope TEXT NOT NULL,
    enqueued_at REAL NOT NULL,
    rejected_at REAL NOT NULL,
    reason TEXT NOT NULL
)
"""
_APPEND = "INSERT INTO spool (envelope, enqueued_at) VALUES (?, ?)"
_PEEK = "SELECT id, envelope, enqueued_at FROM spool ORDER BY id LIMIT ?"
_REMOVE = "DELETE FROM spool WHERE id = ?"
_COUNT = "SELECT count(*) FROM spool"
_ANY = "SELECT EXISTS (SELECT 1 FROM spool)"
_REJECT = """
INSERT INTO spool_rejected (id, envelope, enqueued_at, rejected_at, reason)
SELECT id, envelope, enqueued_at, ?, ? FROM spool WHERE id = ?"""
_REJECTED = "SELECT id, envelope, enqueued_at, reason FROM spool_rejected ORDER BY id"


@dataclass(frozen=True, kw_only=True)
class SpooledEvent:
    """One spooled row: its position, the encoded envelope, and when it was spooled."""

    id: int
    envelope: str
    enqueued_at: float


class Spool:
    """The FIFO under ``directory`` (created if missing)."""

    def __init__(self, directory: Path, *, busy_timeout: float = 30.0) -> None:
        self.directory = private_dir(directory)
        for name in _FILES:  # SQLite gives its -wal and -shm files the database's mode
            if name == DB_FILE or (self.directory / name).exists():
                private_file(self.directory / name)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.directory / DB_FILE,
            timeout=busy_timeout,
            isolation_level=None,  # autocommit: every statement is its own transaction
            check_same_thread=False,
        )
        _while_locked(busy_timeout, lambda: self._db.execute("PRAGMA journal_mode=WAL"))
        self._db.execute("PRAGMA synchronous=FULL")
        # A delivered row's bytes are zeroed, not left in a free page (an erase of its
        # subject must not find the conversation here afterwards); see :meth:`scrub`.
        self._db.execute("PRAGMA secure_delete=ON")
        _while_locked(busy_timeout, lambda: self._db.executescript(_SCHEMA))

    def append(self, envelope: str) -> int:
        """Add one encoded envelope at the tail; returns its row id once it is on disk."""
        with self._lock:
            cursor = self._db.execute(_APPEND, (envelope, time.time()))
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def peek(self, n: int = 100) -> list[SpooledEvent]:
        """Up to ``n`` rows from the head, oldest first, without removing them."""
        with self._lock:
            rows = self._db.execute(_PEEK, (n,)).fetchall()
        return [SpooledEvent(id=r[0], envelope=r[1], enqueued_at=r[2]) for r in rows]

    def remove(self, row_id: int) -> None:
        """Drop one row (after it was delivered)."""
        with self._lock:
            self._db.execute(_REMOVE, (row_id,))

    def reject(self, row_id: int, reason: str) -> None:
        """Move a row that can never be delivered (it no longer decodes) out of the
        FIFO into ``spool_rejected``, so it neither blocks the rows behind it nor is
        lost: an operator can read it there."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(_REJECT, (time.time(), reason, row_id))
                self._db.execute(_REMOVE, (row_id,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def rejected(self) -> list[tuple[SpooledEvent, str]]:
        """The rejected rows with their reasons, oldest first."""
        with self._lock:
            rows = self._db.execute(_REJECTED).fetchall()
        return [(SpooledEvent(id=r[0], envelope=r[1], enqueued_at=r[2]), r[3]) for r in rows]

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute(_COUNT).fetchone()[0])

    def __bool__(self) -> bool:
        """True while anything is spooled (cheaper than ``len``)."""
        with self._lock:
            return bool(self._db.execute(_ANY).fetchone()[0])

    @contextmanager
    def draining(self) -> Iterator[bool]:
        """The exclusive right to drain: yields False if another thread or process has it.

        Each call opens the lock file anew, so ``flock`` excludes threads of this
        process as well as other processes.
        """
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # closing releases the lock

    def scrub(self) -> None:
        """Once the spool is empty: move the write-ahead log into the database (whose
        freed pages ``secure_delete`` zeroes) and truncate it, so no delivered
        envelope's bytes stay in either file. Skipped while another process reads."""
        with self._lock, contextlib.suppress(sqlite3.OperationalError):
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # busy: the next one does

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _while_locked(timeout: float, step: Callable[[], object]) -> None:
    """Run ``step``, again while another process holds the database: two producers
    opening a new spool at once race for the switch to WAL, and SQLite answers that
    race with "database is locked" at once, without waiting on its busy timeout."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            step()
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(0.2, delay * 2)

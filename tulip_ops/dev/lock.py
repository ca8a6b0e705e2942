"""One ``tulip-memory dev`` per data directory.

A second stack on a running directory would delete the running Redis's socket, put a
second consumer on every shard queue (breaking per-namespace order) and rewrite
``tulip.env`` with credentials that die with it. :class:`DataDirLock` takes an
exclusive ``flock`` on ``<data-dir>/dev.lock`` before anything else is touched and
keeps it for the stack's life; the kernel drops it when the process exits, however
it exits, so a crashed stack never leaves a stale lock behind. The file holds the
holder's PID, for the refusal message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_FILE = "dev.lock"


class StackRunning(RuntimeError):
    """Another process holds the data directory."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        self.data_dir = data_dir
        self.pid = pid
        who = f"PID {pid}" if pid is not None else "PID unknown"
        super().__init__(
            f"a tulip-memory dev stack ({who}) is already running on {data_dir}; "
            "stop it first (Ctrl-C in its terminal) or pass another --data-dir"
        )


class DataDirLock:
    """The exclusive right to run a stack on ``data_dir``; non-blocking."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> DataDirLock:
        """Take the lock, or raise :class:`StackRunning` naming the holder's PID."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by children
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise StackRunning(self.path.parent, holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Let the directory go (idempotent). The file stays (unlinking a lock file
        another process may be opening races it), emptied of the PID: an empty lock
        file is a stack that stopped."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing drops the flock


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode().strip())
    return None

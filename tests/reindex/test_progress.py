"""The reindex progress bar: rows/s over a window, ETA, one line per few seconds off a tty."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from tulip_memory.reindex.model import Progress, ReindexJob
from tulip_memory.reindex.progress import ProgressBar, describe

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def job(status: str = "running", error: str | None = None) -> ReindexJob:
    return ReindexJob(
        id=3, scope="", slot="embedding_3", model="hashing-96", spec="hashing:96",
        api_base=None, dim=96, batch=100, planned_rows=10_000, status=status, error=error,
        previous={}, created_at=NOW, updated_at=NOW, switched_at=None, finalized_at=None,
    )  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rate_and_eta_from_the_samples() -> None:
    out, clock = io.StringIO(), Clock()
    bar = ProgressBar(out, clock=clock)
    bar.update(Progress(job(), 100, 0, 0))
    clock.now = 2.0
    bar.update(Progress(job(), 100, 10, 1_000))
    clock.now = 6.0
    bar.update(Progress(job(), 100, 30, 3_000))
    lines = out.getvalue().splitlines()
    # Off a terminal: the first line, then one every 5 seconds.
    assert len(lines) == 2
    assert "30.0%" in lines[-1] and "3,000/10,000 rows" in lines[-1]
    assert "500 rows/s" in lines[-1] and "ETA 0:14" in lines[-1]
    bar.update(Progress(job("switched"), 100, 100, 10_000))
    assert "100.0%" in out.getvalue().splitlines()[-1]


def test_status_says_what_to_do_next() -> None:
    paused = describe(Progress(job("paused", "range 4: model overloaded"), 10, 4, 400))
    assert "status: paused - range 4: model overloaded" in paused
    assert any("--resume" in line for line in paused)
    switched = describe(Progress(job("switched"), 10, 10, 1_000))
    assert any("--finalize" in line for line in switched)


def test_on_a_narrow_terminal_the_bar_fits_every_redraw() -> None:
    """A real pseudo-terminal 60 columns wide: every redraw of the line fits in it,
    so nothing wraps and no stale line is left behind."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    out = os.fdopen(slave, "w", encoding="utf-8")
    try:
        bar = ProgressBar(out)
        for done in (0, 2_500, 5_000, 10_000):
            status = "switched" if done == 10_000 else "running"
            bar.update(Progress(job(status), 100, done // 100, done))
        out.flush()
        written = _drain(master, until=b"10000/10000").decode("utf-8", "replace")
    finally:
        out.close()
        os.close(master)
    redraws = [r for line in written.split("\n") for r in line.split("\r") if r.strip()]
    assert redraws and all(len(r) <= 60 for r in redraws), [len(r) for r in redraws]
    assert redraws[-1].startswith("job 3 switched") and "10000/10000" in redraws[-1]
    assert written.rstrip("\r\n").count("\n") == 0  # one line, redrawn in place


def _drain(master: int, *, until: bytes, timeout: float = 10.0) -> bytes:
    """What the terminal shows: a pty hands its output to the master side in pieces
    (one read may return the first redraw only), so read until ``until`` has come and
    then until nothing more comes for a moment, or ``timeout`` passes."""
    import os
    import select
    import time

    data, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            data += os.read(master, 65536)
        elif until in data:
            break
    return data


def test_off_a_terminal_no_carriage_returns_or_escapes() -> None:
    out = io.StringIO()
    bar = ProgressBar(out)
    bar.update(Progress(job(), 100, 0, 0))
    bar.update(Progress(job("switched"), 100, 100, 10_000))
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()
    assert len(out.getvalue().splitlines()) == 2

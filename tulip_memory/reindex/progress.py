"""The reindex progress bar: fraction, rows/s over a sliding window, and ETA."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TextIO

from tulip_memory.reindex.model import Progress

_WIDTH = 30
#: Seconds of history the rate is measured over.
_WINDOW = 10.0
#: Without a terminal, one line per this many seconds (and on every status change).
_LINE_EVERY = 5.0


class ProgressBar:
    """Renders :class:`Progress` snapshots: one rewritten line on a terminal, a line
    every few seconds otherwise (logs, CI)."""

    def __init__(self, out: TextIO, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._out = out
        self._clock = clock
        self._tty = out.isatty()
        self._samples: deque[tuple[float, int]] = deque()
        self._last_line = float("-inf")
        self._last_status: str | None = None

    def rate(self) -> float | None:
        """Rows per second over the window; ``None`` before two samples."""
        if len(self._samples) < 2:
            return None
        (t0, r0), (t1, r1) = self._samples[0], self._samples[-1]
        return (r1 - r0) / (t1 - t0) if t1 > t0 else None

    def update(self, p: Progress) -> None:
        now = self._clock()
        self._samples.append((now, p.rows_done))
        while len(self._samples) > 2 and now - self._samples[0][0] > _WINDOW:
            self._samples.popleft()
        line = render(p, self.rate())
        changed = p.job.status != self._last_status
        self._last_status = p.job.status
        if self._tty:
            self._out.write("\r\x1b[K" + line + ("\n" if p.finished else ""))
        elif changed or p.finished or now - self._last_line >= _LINE_EVERY:
            self._out.write(line + "\n")
            self._last_line = now
        self._out.flush()


def render(p: Progress, rate: float | None) -> str:
    filled = round(p.fraction * _WIDTH)
    bar = "#" * filled + "." * (_WIDTH - filled)
    job = p.job
    planned = max(job.planned_rows, p.rows_done)
    parts = [
        f"[{bar}] {p.fraction * 100:5.1f}%",
        f"{p.rows_done:,}/{planned:,} rows",
        f"{p.ranges_done}/{p.ranges} batches",
    ]
    if rate is not None:
        parts.append(f"{rate:,.0f} rows/s")
        left = planned - p.rows_done
        if rate > 0 and left > 0 and not p.finished:
            parts.append(f"ETA {_clock_time(left / rate)}")
    parts.append(f"job {job.id} -> {job.spec} ({job.scope_label}): {job.status}")
    return "  ".join(parts)


def _clock_time(seconds: float) -> str:
    s = int(seconds + 0.5)
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def describe(p: Progress) -> list[str]:
    """``--status``: the job, its progress, what to do next."""
    job = p.job
    lines = [
        f"job {job.id}: {job.spec} ({job.model}, {job.dim} dimensions) for {job.scope_label}",
        f"status: {job.status}" + (f" - {job.error}" if job.error else ""),
        f"slot: {job.slot}; batch: {job.batch} rows; started {job.created_at:%Y-%m-%d %H:%M:%S}",
        render(p, None),
    ]
    if job.switched_at is not None:
        lines.append(f"recall switched at {job.switched_at:%Y-%m-%d %H:%M:%S}")
    if job.status == "switched":
        lines.append("old vectors kept: `tulip-memory reindex --finalize` removes them")
    elif job.status in ("paused", "cancelled"):
        lines.append("`tulip-memory reindex --resume` goes on; --finalize abandons the job")
    return lines

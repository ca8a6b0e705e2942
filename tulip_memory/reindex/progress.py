"""The reindex progress bar: fraction, rows/s over a sliding window, and ETA.

On a terminal it is a ``tqdm`` bar, refitted to the terminal's width on every refresh
(a narrow or resized terminal gets a shorter bar, never a wrapped line left behind);
anywhere else (a log file, CI, a pipe) a plain line every few seconds and on every
status change, without carriage returns or escape codes.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO

from tulip_memory.reindex.model import Progress

_WIDTH = 30
#: Seconds of history the rate is measured over.
_WINDOW = 10.0
#: Without a terminal, one line per this many seconds (and on every status change).
_LINE_EVERY = 5.0


class ProgressBar:
    """Renders :class:`Progress` snapshots: a tqdm bar on a terminal, a line every few
    seconds otherwise (logs, CI)."""

    def __init__(self, out: TextIO, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._out = out
        self._clock = clock
        self._tty = out.isatty()
        self._samples: deque[tuple[float, int]] = deque()
        self._last_line = float("-inf")
        self._last_status: str | None = None
        self._bar: Any = None  # the tqdm bar, made on the first update on a terminal

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
        changed = p.job.status != self._last_status
        self._last_status = p.job.status
        if self._tty:
            self._draw(p)
        elif changed or p.finished or now - self._last_line >= _LINE_EVERY:
            self._out.write(render(p, self.rate()) + "\n")
            self._last_line = now
        self._out.flush()

    def _draw(self, p: Progress) -> None:
        from tqdm import tqdm

        job = p.job
        planned = max(job.planned_rows, p.rows_done)
        if self._bar is None:
            self._bar = tqdm(
                total=planned,
                file=self._out,
                unit=" rows",
                dynamic_ncols=True,  # the terminal's width at every refresh
                mininterval=0.5,
                smoothing=0.1,
                leave=True,
            )
        bar = self._bar
        bar.total = planned
        # The status first: a narrow terminal cuts the line's end, not what matters.
        bar.set_description_str(f"job {job.id} {job.status}", refresh=False)
        bar.set_postfix_str(f"{p.ranges_done}/{p.ranges} batches to {job.spec}", refresh=False)
        bar.update(p.rows_done - bar.n)
        if p.finished:
            bar.refresh()
            bar.close()
            self._bar = None

    def close(self) -> None:
        """End the terminal bar where it stands (an interrupted watch)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None


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

"""``tulip-memory import FILE``: publish a history of conversations (JSON Lines) through
the pipeline, behind live traffic, resumable; see :mod:`tulip_ops.backfill`.

The producer's settings come from the environment (``TULIP_BROKER_URL``,
``TULIP_REDIS_URL``, ``TULIP_SPOOL_DIR``, ``TULIP_EXTRACT_SHARDS``, ...), as for the
application itself.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, TextIO

from tulip_ops.backfill import Pacer, Position, StateFile, Summary, run

EXIT_OK, EXIT_BAD_LINES, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_BAR = 30
_WINDOW = 10.0
_TTY_EVERY, _LINE_EVERY = 0.2, 5.0


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "import",
        help="publish a history of conversations (JSON Lines) behind live traffic",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", type=Path, help="JSON Lines: one conversation per line")
    p.add_argument("--state", type=Path, help="progress file (default: FILE.import-state)")
    p.add_argument(
        "--max-backlog",
        type=int,
        default=2,
        help="publish only while the event's shard queue holds fewer events (default 2)",
    )
    p.add_argument("--rate", type=float, help="at most this many events per second")
    p.set_defaults(run=main)


def main(args: argparse.Namespace) -> int:
    from tulip_producer import Producer

    source: Path = args.file
    if not source.is_file():
        print(f"error: no such file: {source}", file=sys.stderr)
        return EXIT_USAGE
    state = StateFile(args.state or source.with_name(source.name + ".import-state"), source)
    bar = Bar(sys.stderr, source.stat().st_size)
    with Producer.from_env() as producer:
        try:
            pacer = Pacer(producer, max_backlog=args.max_backlog, rate=args.rate)
            summary = run(source, producer, state, pacer, bar.update)
        except ValueError as e:  # a state file of another input, a bad option
            print(f"error: {e}", file=sys.stderr)
            return EXIT_USAGE
        except KeyboardInterrupt:
            bar.done()
            print(
                f"interrupted; progress saved to {state.path}: run the same command again to go on",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
        bar.done()
        spooled = producer.spooled
    for line in report(source, summary, spooled):
        print(line)
    return EXIT_BAD_LINES if summary.bad_lines else EXIT_OK


def report(source: Path, s: Summary, spooled: int = 0) -> list[str]:
    """The summary of a run, as printed at its end."""
    lines = [
        f"imported {source}: {s.conversations:,} conversations, {s.events:,} events "
        f"(sessions), {s.messages:,} messages in {duration(s.elapsed)} "
        f"({s.rate:,.1f} events/s); waited {s.waited:.1f}s for the shard queues",
    ]
    if s.skipped_events:
        lines.append(f"{s.skipped_events:,} events were published by an earlier run")
    if spooled:
        lines.append(f"{spooled:,} events wait in the producer's spool for the broker")
    if s.bad_lines:
        lines.append(f"{len(s.bad_lines)} lines or sessions skipped:")
        lines += [f"  line {n}: {why}" for n, why in s.bad_lines[:20]]
        if len(s.bad_lines) > 20:
            lines.append(f"  ... and {len(s.bad_lines) - 20} more")
    return lines


class Bar:
    """Bytes of the file done, events/s over a sliding window, ETA: one rewritten line
    on a terminal, a line every few seconds otherwise."""

    def __init__(self, out: TextIO, total_bytes: int) -> None:
        self._out, self._total = out, max(1, total_bytes)
        self._tty = out.isatty()
        self._samples: deque[tuple[float, int, int]] = deque()
        self._last = float("-inf")
        self._line = ""

    def update(self, position: Position, summary: Summary) -> None:
        now = time.monotonic()
        self._samples.append((now, summary.events, position.offset))
        while len(self._samples) > 2 and now - self._samples[0][0] > _WINDOW:
            self._samples.popleft()
        if now - self._last < (_TTY_EVERY if self._tty else _LINE_EVERY):
            return
        self._last = now
        self._line = self.render(position, summary)
        self._out.write(("\r\x1b[K" + self._line) if self._tty else self._line + "\n")
        self._out.flush()

    def render(self, position: Position, summary: Summary) -> str:
        fraction = min(1.0, position.offset / self._total)
        filled = round(fraction * _BAR)
        parts = [
            f"[{'#' * filled}{'.' * (_BAR - filled)}] {fraction * 100:5.1f}%",
            f"line {position.line:,}",
            f"{summary.events:,} events",
        ]
        (t0, e0, b0), (t1, e1, b1) = self._samples[0], self._samples[-1]
        if t1 > t0:
            parts.append(f"{(e1 - e0) / (t1 - t0):,.1f} events/s")
            byte_rate = (b1 - b0) / (t1 - t0)
            if byte_rate > 0:
                parts.append(f"ETA {duration((self._total - position.offset) / byte_rate)}")
        return "  ".join(parts)

    def done(self) -> None:
        if self._tty and self._line:
            self._out.write("\n")
            self._out.flush()


def duration(seconds: float) -> str:
    """``1h02m03s`` / ``2m03s`` / ``3.4s``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"

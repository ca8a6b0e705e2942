"""``bench/pipeline.py`` before and after a change, in one run: the efficiency ratio.

Exports the tree of ``--before`` (by default the parent of the commit that added
``tulip_workers/failures.py``: the pipeline before failures were classified) into a
temporary directory with ``git archive``, then runs ``bench/pipeline.py`` in that tree
and in this one, alternately, ``--rounds`` times each, with the same options and the
same Python environment. Each run starts its own embedded Postgres and Redis and its
own workers, all importing from their own tree, so each side runs exactly the code of
its commit (``tulip_*``, schema and migrations included). Only the benchmark itself
(``bench/``) is this tree's on both sides: the same measurement, and the one that
migrates its table as the owner role (the old tree's bench predates the owner/app
role split and stalls against it). Prints, for each run of the
end-to-end table (section 2 of ``bench/pipeline.py``), events/s and efficiency
(events/s against shards / L) before and after, the median over rounds, and the
ratio after / before.

Usage: python -m bench.before_after [--before REV] [--after REV] [--rounds 2]
                                    [PIPELINE OPTIONS ...]
       e.g. python -m bench.before_after --rounds 2 --events 200 --shards 2 4
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The module whose arrival is the change measured by default.
CHANGE_MARKER = "tulip_workers/failures.py"
#: A row of section 2: label, events/s, ideal N/L, efficiency.
_ROW = re.compile(r"^\s+(\d+ shards, L = [\d.]+ s)\s+([\d.]+)\s+(\S+)\s+(\S+)")


def before_classification() -> str:
    """The parent of the commit that added :data:`CHANGE_MARKER`."""
    added = _git("log", "--diff-filter=A", "--format=%H", "--", CHANGE_MARKER).split()
    if not added:
        raise SystemExit(f"no commit adds {CHANGE_MARKER}: pass --before")
    return _git("rev-parse", f"{added[-1]}^").strip()


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout


def export(rev: str, into: Path, bench: Path) -> Path:
    """The tree of ``rev`` under ``into`` (no repository), with ``bench`` as its ``bench/``."""
    _extract(rev, into)
    shutil.rmtree(into / "bench")
    shutil.copytree(bench, into / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def _extract(rev: str, into: Path, *paths: str) -> None:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, *paths],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


@dataclass(frozen=True)
class Row:
    rate: float
    efficiency: float | None


def run_pipeline(tree: Path, options: Sequence[str], log: Path) -> dict[str, Row]:
    """One ``python -m bench.pipeline`` of ``tree``; its section-2 rows by label."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TULIP_")}
    env["PYTHONPATH"] = str(tree)
    with log.open("wb") as out:
        done = subprocess.run(
            [sys.executable, "-m", "bench.pipeline", *options],
            cwd=tree,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    text = log.read_text(errors="replace")
    if done.returncode != 0:
        raise SystemExit(f"bench.pipeline of {tree} failed ({done.returncode}):\n{text[-3000:]}")
    return parse(text)


def parse(report: str) -> dict[str, Row]:
    rows: dict[str, Row] = {}
    section = report.split("\n2. End-to-end throughput", 1)[-1].split("\n3. ", 1)[0]
    for line in section.splitlines():
        if m := _ROW.match(line):
            efficiency = None if m[4] == "-" else float(m[4])
            rows[m[1]] = Row(float(m[2]), efficiency)
    if not rows:
        raise SystemExit(f"no throughput table in the report:\n{report[-2000:]}")
    return rows


def median(rows: list[dict[str, Row]], label: str, efficiency: bool) -> float | None:
    values = [r[label].efficiency if efficiency else r[label].rate for r in rows if label in r]
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def print_table(before: str, after: str, runs: dict[str, list[dict[str, Row]]]) -> None:
    labels = list(runs["after"][0])
    n = len(runs["after"])
    print(f"\nbench/pipeline.py before ({before[:10]}) and after ({after}), median of {n}")
    print(
        f"  {'':24} {'ev/s before':>11} {'ev/s after':>10} {'ratio':>7}"
        f" {'eff before':>11} {'eff after':>10} {'ratio':>7}"
    )
    for label in labels:
        cells = []
        for efficiency in (False, True):
            b = median(runs["before"], label, efficiency)
            a = median(runs["after"], label, efficiency)
            digits = 3 if efficiency else 2
            ratio = f"{a / b:7.3f}" if a is not None and b else f"{'-':>7}"
            cells.append(f"{_cell(b, 11, digits)} {_cell(a, 10, digits)} {ratio}")
        print(f"  {label:24} " + " ".join(cells))
    print("  (each round: before, then after; every run with its own services)")


def _cell(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:{width}.{digits}f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--before", help="the commit to compare against (default: see above)")
    parser.add_argument("--after", help="a commit to run as the after side (default: this tree)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side (2)")
    parser.add_argument("--logs", type=Path, help="keep every run's full report here")
    parser.add_argument(
        "--bench-from",
        help="the commit whose bench/ both sides run (default: this tree's); one whose "
        "launcher the before tree can still start",
    )
    args, options = parser.parse_known_args(argv)
    before = _git("rev-parse", args.before).strip() if args.before else before_classification()
    runs: dict[str, list[dict[str, Row]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="tulip-before-") as tmp:
        bench = ROOT / "bench"
        if args.bench_from:
            _extract(_git("rev-parse", args.bench_from).strip(), Path(tmp) / "bench-src", "bench")
            bench = Path(tmp) / "bench-src" / "bench"
        old = export(before, Path(tmp) / "before", bench)
        new = ROOT
        if args.after:
            new = export(_git("rev-parse", args.after).strip(), Path(tmp) / "after", bench)
        logs = args.logs or Path(tmp) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        for r in range(args.rounds):
            for side, tree in (("before", old), ("after", new)):
                started = time.monotonic()
                print(f"round {r + 1}/{args.rounds}: {side} ...", file=sys.stderr, flush=True)
                rows = run_pipeline(tree, options, logs / f"{side}-{r}.log")
                runs[side].append(rows)
                took = time.monotonic() - started
                summary = ", ".join(f"{k}: {v.rate:.2f}/s" for k, v in rows.items())
                print(f"  {side} in {took:.0f}s: {summary}", file=sys.stderr, flush=True)
    print_table(before, args.after or "this tree", runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())

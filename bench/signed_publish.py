"""Publish p50 with ``TULIP_EVENT_SIGNING_KEY`` set, before and after a change, in one run.

With signing on, a checkpoint save also signs its pending entry (an HMAC over the
tenant, thread, ids, digest and the entry's body) and both publish calls check each
new message's fields. This bench exports ``--before`` (default: ``main``) with
``git archive`` and runs the same measurement in that tree and in this one,
alternately, ``--rounds`` times each, each run on its own embedded Redis (broker and
sequence numbers) with a signing producer, nothing consuming:

- **session**: ``Producer.session_ended`` of a six-message session;
- **delta save**: ``Producer.checkpoint_saved`` of a thread growing by one turn a save
  (a delta onto the last save: the common save);
- **whole save**: ``checkpoint_saved`` of a ~100 KB state with the base cache off, so
  every save goes whole (the largest entry an HMAC covers).

Prints each case's p50 (ms), the median over rounds, and the ratio after / before.

Usage: python -m bench.signed_publish [--before REV] [--rounds 3] [--samples 400]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEY = "bench-signing-key-" + "k" * 32
CASES = ("session", "delta save", "whole save")


def measure(samples: int) -> dict[str, float]:
    """One run in this process's tree: each case's p50 in milliseconds."""
    from tulip_memory.messages import Message, Role
    from tulip_memory.state import AgentState
    from tulip_ops.dev.embedded import EmbeddedRedis
    from tulip_producer import Producer, ProducerSettings
    from tulip_producer.bases import PublishedBases

    def turn(i: int, size: int = 120) -> list[Message]:
        text = f"turn {i}: where is my parcel? " * (size // 30)
        return [Message(role=Role.USER, content=text), Message(role=Role.ASSISTANT, content=text)]

    def p50(values: list[float]) -> float:
        return 1000 * statistics.median(values[1:])  # the first also connects

    with tempfile.TemporaryDirectory() as tmp:
        redis = EmbeddedRedis(Path(tmp) / "redis").start()
        try:
            settings = ProducerSettings(
                broker_url=redis.url, spool_dir=Path(tmp) / "spool", signing_key=KEY
            )
            out: dict[str, list[float]] = {case: [] for case in CASES}
            session = turn(0) * 3
            big = AgentState(messages=tuple(m for i in range(100) for m in turn(i, 500)))
            with (
                Producer(settings) as producer,
                Producer(settings, bases=PublishedBases(0, 0)) as whole,
            ):
                messages: list[Message] = []
                for i in range(samples):
                    started = time.perf_counter()
                    producer.session_ended(("acme", "users", f"u{i % 8}"), "t", session)
                    out["session"].append(time.perf_counter() - started)
                    messages += turn(i)
                    state = AgentState(messages=tuple(messages))
                    started = time.perf_counter()
                    producer.checkpoint_saved("thread", state, tenant="acme")
                    out["delta save"].append(time.perf_counter() - started)
                    if i % 4 == 0:  # 100 KB a save: a quarter as many samples
                        started = time.perf_counter()
                        whole.checkpoint_saved(f"big-{i}", big, tenant="acme")
                        out["whole save"].append(time.perf_counter() - started)
                if producer.spooled or whole.spooled:
                    raise SystemExit("events were spooled: the broker failed")
        finally:
            redis.stop()
    return {case: p50(values) for case, values in out.items()}


def export(rev: str, into: Path) -> Path:
    """The tree of ``rev`` under ``into`` (``git archive``)."""
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_in(tree: Path, samples: int) -> dict[str, float]:
    """:func:`measure` (this file's) in a fresh process importing ``tree``'s packages."""
    code = (
        f"import importlib.util, json, sys; sys.path.insert(0, {str(tree)!r}); "
        f"spec = importlib.util.spec_from_file_location('signed_publish', {__file__!r}); "
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); "
        f"print(json.dumps(mod.measure({samples})))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, check=True, capture_output=True, text=True
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="main", help="the revision to compare with (main)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side (3)")
    parser.add_argument("--samples", type=int, default=400, help="publishes of each case (400)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = export(args.before, Path(tmp) / "before")
        sides: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            sides["before"].append(run_in(before, args.samples))
            sides["after"].append(run_in(ROOT, args.samples))
    print(f"publish p50 with signing on, ms (median of {args.rounds} runs; before = {args.before})")
    print(f"  {'':12} {'before':>8} {'after':>8} {'after/before':>13}")
    for case in CASES:
        b = statistics.median(r[case] for r in sides["before"])
        a = statistics.median(r[case] for r in sides["after"])
        print(f"  {case:12} {b:8.3f} {a:8.3f} {a / b:13.2f}")


if __name__ == "__main__":
    main()

"""A worker's CPU priority (:mod:`tulip_workers.priority`): batch queues' workers yield.

Niceness is read back from real processes: a child started in a session of its own
(as a supervisor's ``start_new_session`` starts one) and one started in this
session; a real reindex worker's is checked in ``tests/pipeline/test_reindex_workers.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tulip_workers.priority import AUTOGROUP, BATCH_NICE, nice_for

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import os, sys
from pathlib import Path
from tulip_workers.priority import lower_priority
def group_nice():
    # empty for a task in no autogroup (init's session: the root group), absent without them
    path = Path("/proc/self/autogroup")
    words = path.read_text().split() if path.exists() else []
    return words[-1] if words else "-"
before = group_nice()
after = lower_priority(int(sys.argv[1]))
print(after, os.nice(0), before, group_nice())
"""


def test_a_worker_of_batch_queues_only_runs_at_the_batch_niceness() -> None:
    assert nice_for(["memory.reindex"], {}) == BATCH_NICE == 10
    assert nice_for(["memory.extract.0"], {}) == 0
    assert nice_for(["memory.reindex", "memory.summarize"], {}) == 0  # shares a request path
    assert nice_for([], {}) == 0


def test_the_environment_chooses_for_any_worker() -> None:
    assert nice_for(["memory.reindex"], {"TULIP_WORKER_NICE": "0"}) == 0
    assert nice_for(["memory.extract.0"], {"TULIP_WORKER_NICE": "5"}) == 5
    assert nice_for(["memory.reindex"], {"TULIP_WORKER_NICE": " "}) == BATCH_NICE
    for bad in ("-5", "20", "low"):
        with pytest.raises(ValueError, match="TULIP_WORKER_NICE must be an integer"):
            nice_for(["memory.reindex"], {"TULIP_WORKER_NICE": bad})


def child(nice: int, *, own_session: bool, started_at: int = 0) -> list[str]:
    """A child's niceness after it asked for ``nice``, started at ``started_at``."""
    done = subprocess.run(
        ["nice", "-n", str(started_at), sys.executable, "-c", CHILD, str(nice)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=own_session,
        check=True,
    )
    return done.stdout.split()


@pytest.mark.skipif(sys.platform != "linux", reason="autogroups are Linux's")
def test_a_session_leader_lowers_its_autogroup_too() -> None:
    level = min(19, os.nice(0) + 3)  # above this run's own niceness (CI may run niced)
    after, now, group_before, group_after = child(level, own_session=True)
    assert int(after) == int(now) == level
    if not AUTOGROUP.exists():
        pytest.skip("this kernel has no autogroups; the niceness alone was checked")
    assert group_before == "0"  # a new session starts a new group at the default
    assert group_after == str(int(after))


@pytest.mark.skipif(sys.platform != "linux", reason="autogroups are Linux's")
def test_a_process_in_another_session_leaves_that_sessions_group_alone() -> None:
    level = min(19, os.nice(0) + 4)
    after, now, group_before, group_after = child(level, own_session=False)
    assert int(after) == int(now) == level
    assert group_after == group_before  # this session's group (pytest's) is not lowered


def test_zero_or_a_level_already_passed_changes_nothing() -> None:
    base = os.nice(0)
    assert child(0, own_session=True)[:2] == [str(base), str(base)]
    assert child(10, own_session=False, started_at=15)[:2] == [str(min(19, base + 15))] * 2

"""The key-ordered gate with real threads: per-key order, no head-of-line blocking across
keys, the slot bound, and a head that will never run does not stall its key."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable

import pytest

from tulip_workers import keyed
from tulip_workers.keyed import KeyOrder, envelope_key


def run_all(
    order: KeyOrder, tasks: list[tuple[str, str]], work: Callable[[str, str], None]
) -> None:
    """Admit ``tasks`` in order (as the consumer thread does), then start every task on a
    thread of its own in REVERSE order, so only the gate can restore the order."""
    for task_id, key in tasks:
        order.admit(task_id, key)

    def body(task_id: str, key: str) -> None:
        with order.turn(task_id, key):
            work(task_id, key)

    threads = [threading.Thread(target=body, args=t) for t in reversed(tasks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)


def test_each_key_runs_in_admission_order_and_keys_overlap() -> None:
    order = KeyOrder(slots=8)
    tasks = [(f"t{i}", f"k{i % 5}") for i in range(60)]
    ran: dict[str, list[str]] = defaultdict(list)
    lock = threading.Lock()
    busy: set[str] = set()
    overlapped = []

    def work(task_id: str, key: str) -> None:
        with lock:
            assert key not in busy, f"two events of {key} at once"
            busy.add(key)
            overlapped.append(len(busy))
        time.sleep(0.005)
        with lock:
            busy.discard(key)
            ran[key].append(task_id)

    run_all(order, tasks, work)
    for key, ids in ran.items():
        assert ids == [t for t, k in tasks if k == key]
    assert max(overlapped) > 1  # keys ran side by side
    assert order.waiting() == 0


def test_slots_bound_what_runs_at_once() -> None:
    order = KeyOrder(slots=3)
    tasks = [(f"t{i}", f"k{i}") for i in range(30)]
    lock = threading.Lock()
    now = [0]
    peak = [0]

    def work(task_id: str, key: str) -> None:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.01)
        with lock:
            now[0] -= 1

    run_all(order, tasks, work)
    assert peak[0] == 3 == order.peak_running


def test_a_hot_key_does_not_hold_back_the_others() -> None:
    order = KeyOrder(slots=4)
    hot = [(f"h{i}", "hot") for i in range(40)]
    cold = [(f"c{i}", f"cold{i}") for i in range(10)]
    finished: list[str] = []
    lock = threading.Lock()

    def work(task_id: str, key: str) -> None:
        time.sleep(0.02 if key == "hot" else 0.0)
        with lock:
            finished.append(task_id)

    run_all(order, hot + cold, work)  # every hot event was admitted first
    last_cold = max(finished.index(t) for t, _ in cold)
    assert last_cold < finished.index("h39"), "the cold keys waited behind the hot backlog"


def test_a_head_that_will_never_run_is_dropped_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keyed, "GRACE_SECONDS", 0.0)
    monkeypatch.setattr(keyed, "RECHECK_SECONDS", 0.05)
    live = {"second"}
    order = KeyOrder(slots=2, is_live=lambda task_id: task_id in live)
    order.admit("revoked", "k")
    order.admit("second", "k")
    done = threading.Event()

    def body() -> None:
        with order.turn("second", "k"):
            done.set()

    threading.Thread(target=body).start()
    assert done.wait(10)


def test_a_live_head_is_waited_for() -> None:
    order = KeyOrder(slots=2)
    order.admit("first", "k")
    order.admit("second", "k")
    started = threading.Event()

    def body() -> None:
        with order.turn("second", "k"):
            started.set()

    threading.Thread(target=body, daemon=True).start()
    assert not started.wait(0.3)
    order.forget("first")
    assert started.wait(10)


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (json.dumps({"key": "acme\x1fu1", "id": "x"}), "acme\x1fu1"),
        (json.dumps({"key": 7}), "fallback"),
        (json.dumps([1, 2]), "fallback"),
        ("{not json", "fallback"),
        ("[" * 100_000 + "]" * 100_000, "fallback"),
        (b"\xff\xfe", "fallback"),
        (123, "fallback"),
        (None, "fallback"),
    ],
)
def test_envelope_key_never_raises(body: object, key: str) -> None:
    assert envelope_key(body, "fallback") == key


def test_an_exclusive_task_runs_alone() -> None:
    order = KeyOrder(slots=4)
    order.admit("busy", "a")
    order.admit("suspect", "b")
    order.admit("later", "c")
    events: list[str] = []
    release = threading.Event()

    def busy() -> None:
        with order.turn("busy", "a"):
            events.append("busy-start")
            release.wait(10)
            events.append("busy-end")

    def suspect() -> None:
        with order.turn("suspect", "b", exclusive=True):
            events.append("suspect")
            time.sleep(0.2)
            events.append("suspect-end")

    def later() -> None:
        while "suspect" not in events:
            time.sleep(0.01)
        with order.turn("later", "c"):
            events.append("later")

    threads = [threading.Thread(target=f) for f in (busy, suspect, later)]
    threads[0].start()
    while "busy-start" not in events:
        time.sleep(0.01)
    threads[1].start()
    time.sleep(0.2)
    assert "suspect" not in events  # waits for the running task
    release.set()
    threads[2].start()
    for t in threads:
        t.join(10)
    assert events == ["busy-start", "busy-end", "suspect", "suspect-end", "later"]


def test_a_freed_slot_goes_to_the_tenant_that_waited_longest_for_its_turn() -> None:
    order = KeyOrder(slots=1)
    noisy = [(f"n{i}", f"noisy\x1fk{i}") for i in range(6)]  # admitted first, 6 keys
    quiet = [(f"q{i}", f"quiet\x1fk{i}") for i in range(2)]
    tasks = [*noisy, *quiet]
    for task_id, key in tasks:
        order.admit(task_id, key)
    ran: list[str] = []

    def body(task_id: str, key: str) -> None:
        with order.turn(task_id, key):
            ran.append(task_id)

    with order.turn("gate", "gate\x1fk"):  # holds the slot while every task waits
        threads = [threading.Thread(target=body, args=t) for t in reversed(tasks)]
        for t in threads:
            t.start()
        while len(order._waiters) < len(tasks):
            time.sleep(0.001)
    for t in threads:
        t.join(30)
    # one slot, taken in turn by each tenant with work waiting (the oldest head of
    # each first): the quiet tenant's events do not wait for the noisy tenant's older ones
    assert ran == ["n0", "q0", "n1", "q1", "n2", "n3", "n4", "n5"]


def test_a_tenant_holds_at_most_its_share_of_the_slots() -> None:
    order = KeyOrder(slots=4, tenant_share=0.5)
    assert order.tenant_cap == 2
    tasks = [(f"n{i}", f"noisy\x1fk{i}") for i in range(8)] + [("q0", "quiet\x1fk")]
    lock = threading.Lock()
    running: dict[str, int] = defaultdict(int)
    peak: dict[str, int] = defaultdict(int)

    def work(task_id: str, key: str) -> None:
        tenant = key.split("\x1f")[0]
        with lock:
            running[tenant] += 1
            peak[tenant] = max(peak[tenant], running[tenant])
        time.sleep(0.01)
        with lock:
            running[tenant] -= 1

    run_all(order, tasks, work)
    assert peak["noisy"] == 2 and peak["quiet"] == 1

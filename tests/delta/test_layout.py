"""The merge plan alone (no I/O): objects per checkpoint stay within the documented bound."""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from itertools import pairwise
from typing import Any

import pytest

from tests.delta.conftest import grow
from tulip_memory.delta import DeltaCheckpointer, InMemoryObjectStorage
from tulip_memory.delta.codec import KIND_HEAD, decode_frame_of, digest, dumps
from tulip_memory.delta.diff import diff
from tulip_memory.delta.errors import CorruptCheckpointError
from tulip_memory.delta.layout import (
    REPLAY_MARK_EVERY,
    Policy,
    append,
    finish_flush,
    flush_level,
    plan_flush,
    read_plan,
    rebuild,
)
from tulip_memory.delta.manifest import (
    Entry,
    HeadState,
    Manifest,
    ManifestEncoder,
    decode_head_manifest,
    decode_log,
    encode_head_onto,
)


def bound(depth: int, n: int) -> int:
    """Documented GETs for an old checkpoint in an epoch of n entries (+1 tail object)."""
    levels = math.floor(math.log(n, depth + 1) + 1e-9) if n > 1 else 0
    return depth * levels + 1


def entry(seq: int, kind: str = "delta") -> Entry:
    payload = {"messages": []} if kind == "full" else ["{", {}, []]
    return Entry(seq, 0, "0" * 16, kind, payload, size=10)  # type: ignore[arg-type]


def simulate(depth: int, n: int) -> tuple[Manifest, dict[str, bytes], int]:
    """n saves into one epoch; returns the manifest, live objects and the most GETs seen."""
    m: Manifest | None = None
    store: dict[str, bytes] = {}
    worst = 0
    for seq in range(n):
        step = append(m, entry(seq, "full" if seq == 0 else "delta"), f"c{seq}", f"{seq:08x}", 1)
        m = step.manifest
        flush = plan_flush(m, depth + 1)
        if flush is not None:
            inputs = [e for o in flush.inputs for e in decode_log(o.name, store[o.name])]
            step = finish_flush(m, flush, inputs, f"{seq:08x}", 1)
            m = step.manifest
            for name in step.retired:
                del store[name]
        store.update(step.writes)
        if seq % 7 == 0 or seq == n - 1:
            worst = max([worst, *(len(read_plan(m, s).objects) for s, _ in m.checkpoints)])
    assert m is not None
    return m, store, worst


def test_flush_levels() -> None:
    assert [flush_level(c, 3) for c in range(1, 10)] == [0, 0, 1, 0, 0, 1, 0, 0, 2]
    assert flush_level(7, 1) == 1


@pytest.mark.parametrize(("depth", "n"), [(1, 130), (2, 250), (5, 400), (5, 1300), (10, 300)])
def test_reads_per_checkpoint_stay_within_the_bound(depth: int, n: int) -> None:
    m, store, worst = simulate(depth, n)
    assert worst <= bound(depth, n)
    assert sorted(store) == sorted(m.object_names())  # nothing retired is still referenced
    entries = sorted(e.seq for name in store for e in decode_log(name, store[name])) + [
        e.seq for e in m.pending
    ]
    assert sorted(entries) == list(range(n))  # every entry stored exactly once


def test_depth_zero_is_a_snapshot_per_save() -> None:
    m: Manifest | None = None
    for seq in range(5):
        m = append(m, entry(seq, "full"), f"c{seq}", f"{seq:08x}", 1).manifest
        flush = plan_flush(m, Policy(max_chain_depth=0).fanout)
        assert flush is not None and flush.inputs == ()
        m = finish_flush(m, flush, [], f"{seq:08x}", 1).manifest
    assert m is not None and len(m.epochs) == 5
    assert all(len(read_plan(m, s).objects) == 1 for s in range(5))


@pytest.mark.parametrize(
    "bad",
    [
        {"max_chain_depth": -1},
        {"compression_level": 10},
        {"max_epoch_age": timedelta(0)},
    ],
)
def test_bad_policies_fail_early(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Policy(**bad)


async def test_epochs_restart_when_older_than_max_epoch_age() -> None:
    storage = InMemoryObjectStorage()
    log = storage.thread("t", Policy(max_epoch_age=timedelta(days=1)))
    hour = 3600 * 10**6
    for i, state in enumerate(grow(6)):
        await log.append(state.to_checkpoint(), f"c{i}", i * 10 * hour)
    head = await log.head()
    assert head is not None
    assert [e.start for e in head.manifest.epochs] == [0, 3]  # at 0h, then at 30h (>= 24h later)
    for i, state in enumerate(grow(6)):
        assert await log.load(f"c{i}") == state.to_checkpoint()


def test_a_head_built_on_the_last_ones_manifest_reads_back_the_same() -> None:
    """A save's manifest section is built on the head written before it (the ids it
    compressed are not compressed again): grown by one id or by several, shrunk (a
    delete), its last id replaced, or built on another thread's, every head reads back
    its own manifest; the ids come first, readers take the keys in any order."""
    state = HeadState((b"",), segmented=False)

    def manifest(ids: list[str]) -> Manifest:
        return Manifest(next_seq=len(ids), checkpoints=tuple(enumerate(ids)), head_digest="d")

    ids = [f"{i:032x}" for i in range(300)]
    steps = [ids[:n] for n in range(301)] + [[*ids, "a", "b", "c"]]
    steps += [[*ids[:10], *ids[11:]], [*ids[:-1], "replaced"], ["another", "thread"]]
    encoder = None
    for step in steps:
        m = manifest(step)
        head, encoder, _ = encode_head_onto(m, state, 6, encoder)
        assert encoder is not None and encoder.checkpoints == m.checkpoints
        assert decode_head_manifest("k", head)[0] == m
        section = zlib.decompress(decode_frame_of("k", head, (KIND_HEAD,))[1][0])
        assert section.startswith(b'{"ids":[')
    stored, none, _ = encode_head_onto(m, state, 0, encoder)  # level 0: as it is, no encoder
    assert none is None and decode_head_manifest("k", stored)[0] == m


async def test_a_storage_without_version_tags_builds_each_manifest_on_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Memory and file storages have no version tags, so each save reads the head; the
    manifest encoder cached with the state that head names is still built on, not
    started again (which encoded every checkpoint id on every save), and every
    checkpoint loads back."""
    starts = []
    start = ManifestEncoder.start.__func__  # type: ignore[attr-defined]

    def counted(cls: type[ManifestEncoder]) -> ManifestEncoder:
        starts.append(1)
        return start(cls)  # type: ignore[no-any-return]

    monkeypatch.setattr(ManifestEncoder, "start", classmethod(counted))
    cp = DeltaCheckpointer(InMemoryObjectStorage())
    states = grow(120)
    ids = [await cp.save(s, "t") for s in states]
    assert len(starts) == 1
    for n in (0, 59, 119):
        assert await cp.load("t", ids[n]) == states[n]


def replayed(states: list[dict[str, Any]]) -> list[tuple[str, Entry]]:
    """Entries saving ``states`` in turn: the first full, then patches from each one."""
    sources = [("o", Entry(0, 0, digest(dumps(states[0])), "full", states[0]))]
    for seq, (old, new) in enumerate(pairwise(states), 1):
        patch = diff(old, new) or ["{", {}, []]
        sources.append(("o", Entry(seq, 0, digest(dumps(new)), "delta", patch)))
    return sources


def test_a_rebuilt_states_digest_hashes_appended_lists_from_their_entries() -> None:
    """Appends, then an edit, a removal and a re-add of the list, a field turned into a
    list, appends again: each checkpoint rebuilds exactly and passes its digest."""
    a: dict[str, Any] = {"messages": [{"n": 0}], "x": 1}
    states = [a]
    changes: list[Callable[[dict[str, Any]], dict[str, Any]]] = [
        lambda s: {**s, "messages": [*s["messages"], {"n": 1}, "é\ud800"]},
        lambda s: {**s, "messages": [*s["messages"], []], "x": 2},
        lambda s: {**s, "messages": [{"n": 9}, *s["messages"][1:]]},  # an edit
        lambda s: {**s, "messages": [*s["messages"], {"n": 3}]},
        lambda s: {k: v for k, v in s.items() if k != "messages"},  # removed
        lambda s: {**s, "messages": [{"n": 4}]},  # back, as a new value
        lambda s: {**s, "messages": [*s["messages"], {"n": 5}], "x": [1]},
        lambda s: {**s, "x": [*s["x"], 2.0], "a": []},
        lambda s: {**s, "a": [0], "messages": [*s["messages"], 1.5]},
    ]
    for change in changes:
        states.append(change(states[-1]))
    sources = replayed(states)
    for seq, state in enumerate(states):
        assert dumps(rebuild(sources, seq)) == dumps(state)
    one, two = {"messages": [1]}, {"messages": [1, 2]}
    nothing = ["{", {"messages": ["[", [[0, 1], {"+": []}]]}, []]  # appends no item
    empty = [
        ("o", Entry(0, 0, digest(dumps(one)), "full", one)),
        ("o", Entry(1, 0, digest(dumps(one)), "delta", nothing)),
        ("o", Entry(2, 0, digest(dumps(two)), "delta", diff(one, two))),
    ]
    assert [rebuild(empty, s)["messages"] for s in (0, 1, 2)] == [[1], [1], [1, 2]]


def test_an_entry_whose_appended_items_are_not_the_saved_ones_fails_its_digest() -> None:
    states = [{"messages": [1]}, {"messages": [1, 2]}, {"messages": [1, 2, 3]}]
    sources = replayed(states)
    key, bad = sources[1]
    sources[1] = (key, replace(bad, payload=["{", {"messages": ["[", [[0, 1], {"+": [7]}]]}, []]))
    for reused in (False, True):  # the state encoded, or its lists hashed from entries
        assert rebuild(sources, 0, reused=reused) == states[0]
        for seq in (1, 2):
            with pytest.raises(CorruptCheckpointError, match="does not match its digest"):
                rebuild(sources, seq, reused=reused)


def test_rebuilds_that_start_from_an_earlier_replay_are_exact() -> None:
    """Replays keep states with entries (every REPLAY_MARK_EVERY, and at each object's
    end) and later rebuilds start there: any order of loads, edits among the appends."""
    states: list[dict[str, Any]] = [{"messages": [{"i": 0}], "n": 0}]
    for i in range(1, 150):
        last = states[-1]
        messages = [*last["messages"], {"i": i}] if i != 120 else [{"edited": i}]
        states.append({**last, "messages": messages, "n": i % 5})
    entries = replayed(states)
    sources = [(f"o{min(e.seq // 50, 2)}", e) for _, e in entries]  # three objects
    order = [*range(149, -1, -7), *range(150), 75, 149, 0]
    random.Random(3).shuffle(order)
    for seq in order:
        assert dumps(rebuild(sources, seq, reused=False)) == dumps(states[seq])
    assert not any(e.replayed for _, e in sources)  # entries no cache keeps: nothing kept
    for seq in order:
        assert dumps(rebuild(sources, seq)) == dumps(states[seq])
    assert sum("state" in e.replayed for _, e in sources) >= 150 // REPLAY_MARK_EVERY

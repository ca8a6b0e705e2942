"""The latest state in segments: same bytes as the canonical encoding, appends cost
the change, anything else falls back exactly, and heads written before segments load."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.delta.conftest import CountingStorage, grow
from tulip_memory.delta import (
    CorruptCheckpointError,
    DeltaCheckpointer,
    FileDeltaStorage,
    InMemoryObjectStorage,
    StateNotSerializableError,
)
from tulip_memory.delta import segments as seg
from tulip_memory.delta.cache import LatestCache
from tulip_memory.delta.codec import KIND_SEGMENTED_HEAD, dumps, encode_state
from tulip_memory.delta.diff import apply
from tulip_memory.delta.keys import ThreadKeys
from tulip_memory.delta.manifest import HeadState, decode_head_manifest, encode_head
from tulip_memory.state import AgentState

V1 = Path(__file__).parent / "data" / "v1-heads"

leaf = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-2, 2) | st.text(max_size=3)
value = st.recursive(
    leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=2), c, max_size=3)
)
states = st.dictionaries(st.text(max_size=3), value, max_size=4)


def assert_same_as_canonical(data: dict[str, Any], latest: seg.Latest) -> None:
    canonical = encode_state(data)
    assert latest.raw == canonical.raw and latest.digest == canonical.digest
    assert latest.size == len(canonical.raw)  # digest and size without joining the bytes
    assert dumps(latest.data) == canonical.raw
    decoded = seg.decode("k", latest.sections(6))
    assert dumps(decoded.data) == canonical.raw and decoded.digest == canonical.digest
    assert dumps(seg.decode_data("k", latest.sections(6))) == canonical.raw


@settings(max_examples=150, deadline=None)
@given(states, states)
def test_any_state_and_any_successor_encode_to_the_canonical_bytes(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    first = seg.encode(a, None, 6)
    assert first.patch is None
    assert_same_as_canonical(a, first.latest)
    second = seg.encode(b, first.latest, 6)
    assert_same_as_canonical(b, second.latest)
    if second.patch is not None:
        assert dumps(apply(first.latest.data, second.patch)) == second.latest.raw


def test_an_append_is_a_tail_patch_and_rewrites_only_the_open_segment() -> None:
    states = [s.to_checkpoint() for s in grow(400)]
    latest = seg.encode(states[0], None, 6).latest
    for data in states[1:]:
        new = seg.encode(data, latest, 6)
        assert new.patch is not None
        piece = new.patch[1]["messages"]
        assert piece == [
            "[",
            [[0, len(latest.lists["messages"].items)], {"+": [data["messages"][-1]]}],
        ]
        old_segments = latest.lists["messages"].segments
        segments = new.latest.lists["messages"].segments
        assert segments[: len(old_segments) - 1] == old_segments[:-1]  # sealed ones reused
        assert all(s.sealed for s in segments[:-1])
        latest = new.latest
    assert len(latest.lists["messages"].segments) > 1
    assert_same_as_canonical(states[-1], latest)


steps = st.lists(
    st.tuples(st.sampled_from(["append", "before", "after", "edit", "drop"]), value),
    min_size=1,
    max_size=12,
)


@settings(max_examples=100, deadline=None)
@given(steps)
def test_a_digest_hashed_on_from_the_last_saves_is_the_digest_of_the_bytes(
    changes: list[tuple[str, Any]],
) -> None:
    """Each save hashes on from its base's :class:`~seg.HashMark` where it can (items
    appended, the fields before the list unchanged): through any run of saves, the
    digest is still that of the state's canonical bytes."""
    data: dict[str, Any] = {"a": 0, "m": [1], "n": [2], "z": 0}
    latest = seg.encode(data, None, 6).latest
    for change, v in changes:
        data = dict(data)
        if change == "append":
            data["m"] = [*data.get("m", []), v]
        elif change in ("before", "after"):
            data["a" if change == "before" else "z"] = v
        elif change == "edit":
            data["m"] = [v, *data.get("m", [])[1:]]
        else:
            data.pop("m", None)
        new = seg.encode(data, latest, 6)
        assert_same_as_canonical(data, new.latest)
        latest = new.latest


def test_equal_but_not_identical_old_items_are_not_taken_for_the_same() -> None:
    base = seg.encode({"messages": [{"n": 1}, {"n": 2}]}, None, 6).latest
    new = seg.encode({"messages": [{"n": 1.0}, {"n": 2}, {"n": 3}]}, base, 6)
    assert new.patch is None  # 1 == 1.0, but their bytes differ: the full path
    assert dumps(new.latest.data) == b'{"messages":[{"n":1.0},{"n":2},{"n":3}]}'
    flag = seg.encode({"messages": [{"n": True}, {"n": 2}]}, base, 6)
    assert dumps(flag.latest.data) == b'{"messages":[{"n":true},{"n":2}]}'


@pytest.mark.parametrize(
    ("messages", "path"),
    [
        ([{"a": (1, 2)}, {"b": 1}, {"c": 1}], "state.messages[0].a"),
        ([{"a": [1, 2]}, {"b": 1}, {"c": (1,)}], "state.messages[2].c"),
        ([{"a": [1, 2]}, {"b": 1}, {"c": float("nan")}], "state.messages[2].c"),
        ([{"a": [1, 2]}, {1: 1}, {"c": 1}], "state.messages[1]"),
    ],
)
def test_what_json_would_change_is_refused_in_old_and_new_items(
    messages: list[Any], path: str
) -> None:
    base = seg.encode({"messages": [{"a": [1, 2]}, {"b": 1}]}, None, 6).latest
    with pytest.raises(StateNotSerializableError) as e:
        seg.encode({"messages": messages}, base, 6)
    assert e.value.path == path


def test_many_segments_are_repacked_within_a_heads_sections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(seg, "SEGMENT_BYTES", 40)
    states = [s.to_checkpoint() for s in grow(600)]
    latest = seg.encode(states[0], None, 6).latest
    for data in states[1:]:
        latest = seg.encode(data, latest, 6).latest
        assert len(latest.lists["messages"].segments) <= seg.MAX_SEGMENTS
    assert_same_as_canonical(states[-1], latest)
    fresh = seg.encode(states[-1], None, 6).latest
    assert len(fresh.lists["messages"].segments) <= seg.MAX_SEGMENTS
    assert_same_as_canonical(states[-1], fresh)


async def test_a_warm_save_reads_one_head_and_writes_a_segmented_one() -> None:
    counted = CountingStorage(InMemoryObjectStorage())
    cp = DeltaCheckpointer(counted, max_chain_depth=3)
    thread = grow(30)
    ids = [await cp.save(s, "t") for s in thread]
    head = (await counted.read_objects([ThreadKeys.of("t").head]))[ThreadKeys.of("t").head]
    assert head is not None and head[4:5] == KIND_SEGMENTED_HEAD
    counted.reset()
    await cp.load("t")
    assert (counted.read_trips, counted.gets) == (1, 1)
    for cid, state in zip(ids, thread, strict=True):
        assert await cp.load("t", cid) == state


async def test_saves_by_another_writer_in_between_are_built_on() -> None:
    storage = InMemoryObjectStorage()
    a, b = DeltaCheckpointer(storage), DeltaCheckpointer(storage)
    thread = grow(40)
    ids = []
    for i, state in enumerate(thread):
        ids.append(await (a if i % 3 else b).save(state, "t"))
    edited = thread[-1].with_messages(thread[-1].messages[:5])
    ids.append(await a.save(edited, "t"))
    for cid, state in zip(ids, [*thread, edited], strict=True):
        loaded = await DeltaCheckpointer(storage).load("t", cid)
        assert loaded is not None and dumps(loaded.to_checkpoint()) == dumps(state.to_checkpoint())


async def test_heads_written_before_segments_still_load_and_are_rewritten(tmp_path: Path) -> None:
    shutil.copytree(V1, tmp_path / "v1")
    storage = FileDeltaStorage(tmp_path / "v1", fsync=False)
    head_key = ThreadKeys.of("thread/v1").head
    raw = (await storage.read_objects([head_key]))[head_key]
    assert raw is not None and raw[4:5] == b"H"  # written by the layout before segments
    cp = DeltaCheckpointer(storage, max_chain_depth=2)
    thread = grow(30)
    for i in range(20):
        assert await cp.load("thread/v1", f"c{i}") == thread[i]
    assert await cp.load("thread/v1") == thread[19]
    for i in range(20, 30):
        await cp.save(thread[i], "thread/v1", f"c{i}")
    raw = (await storage.read_objects([head_key]))[head_key]
    assert raw is not None and raw[4:5] == KIND_SEGMENTED_HEAD
    manifest, _ = decode_head_manifest(head_key, raw)
    assert len(manifest.epochs) == 1  # the old history is built on, not restarted
    fresh = DeltaCheckpointer(storage, max_chain_depth=2)
    for i in range(30):
        assert await fresh.load("thread/v1", f"c{i}") == thread[i]


def test_the_cache_keeps_its_bounds() -> None:
    latest = seg.encode(grow(3)[-1].to_checkpoint(), None, 6).latest
    cache = LatestCache(max_threads=2, max_bytes=latest.size * 3)
    for t in "abc":
        cache.put(t, (0, "c"), latest)
    assert len(cache) == 2 and cache.get("a", (0, "c"), latest.digest) is None
    assert cache.get("c", (0, "c"), latest.digest) is latest
    assert cache.get("c", (1, "c"), latest.digest) is None  # another checkpoint
    small = LatestCache(max_threads=5, max_bytes=latest.size * 2)
    for t in "abc":
        small.put(t, (0, "c"), latest)
    assert len(small) == 2 and small.bytes == latest.size * 2
    small.put("big", (0, "c"), seg.encode(grow(60)[-1].to_checkpoint(), None, 6).latest)
    assert small.get("big", (0, "c"), "") is None and small.bytes <= small.max_bytes


async def test_an_unreadable_segment_fails_the_load_and_a_save_starts_over() -> None:
    storage = InMemoryObjectStorage()
    cp = DeltaCheckpointer(storage, latest_cache=LatestCache(0, 0))
    thread = grow(12)
    for state in thread[:10]:
        await cp.save(state, "t")
    key = ThreadKeys.of("t").head
    manifest, head_state = decode_head_manifest(key, storage.objects.get(key) or b"")
    broken = HeadState((head_state.sections[0], b"not zlib"), segmented=True)
    storage.objects.put(key, encode_head(manifest, broken, 6))
    with pytest.raises(CorruptCheckpointError) as e:
        await cp.load("t")
    assert key in str(e.value)
    await cp.save(thread[10], "t")
    assert await cp.load("t") == thread[10]


def test_state_round_trip_of_a_thread() -> None:
    state = AgentState(messages=grow(5)[-1].messages, metadata={"x": [1, 2.5, None]})
    latest = seg.encode(state.to_checkpoint(), None, 6).latest
    assert AgentState.from_checkpoint(latest.data) == state


async def test_tenants_share_one_cache_budget_and_never_each_others_entries() -> None:
    from tulip_memory.delta.tenants import tenant_checkpointer

    base = DeltaCheckpointer(InMemoryObjectStorage(), latest_cache=LatestCache(max_threads=3))
    acme, globex = tenant_checkpointer(base, "acme"), tenant_checkpointer(base, "globex")
    a_states, g_states = grow(4), grow(4, metadata=lambda i: {"tenant": "globex", "i": i})
    for a_state, g_state in zip(a_states, g_states, strict=True):
        await acme.save(a_state, "t")
        await globex.save(g_state, "t")
    assert len(base.latest_cache) == 2 and len(acme.latest_cache) == 2  # one shared budget
    assert await acme.load("t") == a_states[-1] and await globex.load("t") == g_states[-1]
    for n in range(5):
        await tenant_checkpointer(base, f"other-{n}").save(a_states[0], "t")
    assert len(base.latest_cache) == 3

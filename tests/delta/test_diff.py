"""diff/apply as pure functions: every change, and patches that do not fit."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tulip_memory.delta.diff import PatchError, apply, apply_owned, diff


def roundtrip(old: Any, new: Any) -> list[Any] | None:
    patch = diff(old, new)
    assert json.loads(json.dumps(patch)) == patch  # patches are JSON
    assert (old if patch is None else apply(old, patch)) == new
    return patch


def msgs(*ids: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"message number {i} " * 5} for i in ids]


def test_equal_values_need_no_patch() -> None:
    assert diff({"a": [1, 2]}, {"a": [1, 2]}) is None


def test_append_copies_the_old_list_and_carries_only_the_new_items() -> None:
    old, new = {"messages": msgs(*range(50))}, {"messages": msgs(*range(52))}
    patch = roundtrip(old, new)
    assert patch == ["{", {"messages": ["[", [[0, 50], {"+": msgs(50, 51)}]]}, []]


@pytest.mark.parametrize(
    "new_ids",
    [
        list(range(10)),  # truncated history
        [0, 1, *range(30, 60)],  # compacted middle
        [0, *range(2, 60)],  # one removed
        [99, *range(60)],  # inserted at the front
        [*range(30), 77, *range(30, 60)],  # inserted in the middle
        [*range(60), 61, 62],  # appended
        [],  # emptied
    ],
)
def test_list_changes_cost_what_changed(new_ids: list[int]) -> None:
    old, new = {"messages": msgs(*range(60))}, {"messages": msgs(*new_ids)}
    patch = roundtrip(old, new)
    assert len(json.dumps(patch)) <= len(json.dumps(new)) + 40


def test_edited_message_and_append_in_one_save() -> None:
    old_msgs = msgs(*range(40))
    new_msgs = [*old_msgs, *msgs(40)]
    new_msgs[1] = {"role": "system", "content": "memory block, refreshed"}
    patch = roundtrip({"messages": old_msgs}, {"messages": new_msgs})
    assert patch is not None
    assert len(json.dumps(patch)) < 400  # not the 40 messages again


def test_nested_objects_patch_only_their_changed_keys() -> None:
    old = {"metadata": {"user": {"name": "ann", "prefs": {"a": 1, "b": 2}}, "big": "x" * 500}}
    new = {"metadata": {"user": {"name": "ann", "prefs": {"a": 1, "c": 3}}, "big": "x" * 500}}
    patch = roundtrip(old, new)
    assert "x" * 500 not in json.dumps(patch)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"a": 1}, {"a": "1"}),
        ({"a": [1]}, {"a": {"0": 1}}),
        ({"a": None}, {}),
        ({}, {"a": None}),
        ([1, 2, 3], "now a string"),
        ({"tool_executions": {"k1": {"ok": True}}}, {"tool_executions": {}}),
        ({"iterations": 3}, {"iterations": 4}),
    ],
)
def test_type_changes_and_removals(old: Any, new: Any) -> None:
    roundtrip(old, new)


@pytest.mark.parametrize(
    ("old", "patch"),
    [
        ([1, 2], ["[", [[0, 3]]]),  # range past the end
        ([1, 2], ["[", [[1, 0]]]),  # empty or reversed range
        ({"a": 1}, ["[", [[0, 1]]]),  # list patch on an object
        ([1], ["{", {}, []]),  # object patch on a list
        ({"a": 1}, ["{", {}, ["b"]]),  # removal of an absent key
        ({"a": 1}, ["{", {"b": ["[", []]}, []]),  # patch of an absent key
        ({"a": 1}, ["?", 1]),
        ({"a": 1}, "not a patch"),
        ({"a": 1}, []),
    ],
)
def test_patches_that_do_not_fit_are_refused(old: Any, patch: Any) -> None:
    with pytest.raises(PatchError):
        apply(old, patch)


def test_apply_leaves_the_old_value_untouched() -> None:
    old = {"messages": msgs(1, 2), "metadata": {"a": {"b": 1}}}
    snapshot = json.dumps(old)
    new = {"messages": msgs(2, 3), "metadata": {"a": {"b": 2}}}
    roundtrip(old, new)
    assert json.dumps(old) == snapshot


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=3), children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None)
@given(json_values, json_values)
def test_any_two_json_values(old: Any, new: Any) -> None:
    roundtrip(old, new)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 6), max_size=25),
    st.lists(
        st.tuples(st.sampled_from(["insert", "delete", "replace"]), st.integers(0, 30)),
        max_size=8,
    ),
)
def test_lists_under_random_edits(items: list[int], edits: list[tuple[str, int]]) -> None:
    old = [{"v": i} for i in items]
    new = list(old)
    for op, at in edits:
        at = at % (len(new) + 1)
        if op == "insert":
            new.insert(at, {"v": 100 + at})
        elif new and at < len(new):
            if op == "delete":
                del new[at]
            else:
                new[at] = {"v": -at}
    roundtrip({"m": old}, {"m": new})


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.text(max_size=2), json_values, max_size=4),
    st.lists(st.dictionaries(st.text(max_size=2), json_values, max_size=4), max_size=5),
)
def test_replaying_in_place_gives_what_apply_gives(
    first: dict[str, Any], later: list[dict[str, Any]]
) -> None:
    first["m"] = [0]
    states = [first, *later]
    for i, s in enumerate(states[1:], 1):  # appends to a list: the case replayed in place
        if i % 3 and isinstance(states[i - 1].get("m"), list):
            s["m"] = [*states[i - 1]["m"], i]
    patches = [diff(a, b) or ["{", {}, []] for a, b in itertools.pairwise(states)]
    snapshot = json.dumps(patches)
    state, owned = dict(first), set[str]()
    for patch, expected in zip(patches, states[1:], strict=True):
        state = apply_owned(state, patch, owned)
        assert state == expected
    assert json.dumps(patches) == snapshot  # no patch was changed by replaying it

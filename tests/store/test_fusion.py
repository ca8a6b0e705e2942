"""Reciprocal-rank fusion: a pure function, tested without a store."""

from __future__ import annotations

import pytest

from tulip_memory.store.fusion import DEFAULT_K, fuse


def test_scores_are_weighted_reciprocal_ranks() -> None:
    # a: 1/61 + 1/62; b: 1/62 + 1/61; c: 1/63; d: 1/63. Ties keep first-seen order.
    assert fuse([["a", "b", "c"], ["b", "a", "d"]]) == ["a", "b", "c", "d"]
    assert DEFAULT_K == 60


def test_agreement_beats_a_single_first_place() -> None:
    # "both" is second in each list; each "top" is first in one list only.
    assert fuse([["top1", "both"], ["top2", "both"]])[0] == "both"


def test_every_key_is_returned_once() -> None:
    fused = fuse([["a", "b"], ["c"], [], ["b", "d", "a"]])
    assert sorted(fused) == ["a", "b", "c", "d"]
    assert len(fused) == len(set(fused))


def test_a_key_repeated_in_one_list_counts_once_at_its_best_rank() -> None:
    assert fuse([["a", "b", "a"], ["b", "a"]]) == fuse([["a", "b"], ["b", "a"]])


def test_weights_shift_the_balance() -> None:
    lists = [["x", "y"], ["y", "x"]]
    assert fuse(lists, weights=[2.0, 1.0])[0] == "x"
    assert fuse(lists, weights=[1.0, 2.0])[0] == "y"
    # A zero weight keeps its keys, last.
    assert fuse([["a"], ["z"]], weights=[1.0, 0.0]) == ["a", "z"]


def test_small_k_favours_the_head_of_each_list() -> None:
    lists = [["solo", "m1", "m2", "m3"], ["m4", "m3", "m1", "m2"]]
    # "solo" is first in one list only: at k=0 that (1/1) beats any two lower places;
    # at k=60 the keys both lists hold win.
    assert fuse(lists, k=0)[0] == "solo"
    assert fuse(lists, k=60)[0] == "m1"


def test_ties_go_to_the_key_met_first_reading_rank_by_rank() -> None:
    assert fuse([["a", "b"], ["c", "d"]]) == ["a", "c", "b", "d"]
    assert fuse([["c", "d"], ["a", "b"]]) == ["c", "a", "d", "b"]


def test_empty_input() -> None:
    assert fuse([]) == []
    assert fuse([[], []]) == []


def test_works_for_any_hashable_key() -> None:
    assert fuse([[(1, "a"), (2, "b")], [(2, "b")]]) == [(2, "b"), (1, "a")]


@pytest.mark.parametrize(
    ("k", "weights", "match"),
    [
        (-1, None, "k must be"),
        (60, [1.0], "2 rankings"),
        (60, [1.0, -1.0], "finite and >= 0"),
        (60, [1.0, float("nan")], "finite and >= 0"),
        (60, [1.0, float("inf")], "finite and >= 0"),
    ],
)
def test_bad_arguments_are_refused(k: int, weights: list[float] | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fuse([["a"], ["b"]], k=k, weights=weights)

"""The claim pool's assignment (:func:`tulip_ops.claim.assign`): every shard to exactly
one member, balanced, the same for every member that sees the same set, and a member
joining or leaving moves few shards."""

from __future__ import annotations

import pytest

from tulip_ops.claim import assign


@pytest.mark.parametrize("shards", [1, 2, 4, 8, 13])
@pytest.mark.parametrize("members", [1, 2, 3, 5, 9])
def test_every_shard_once_and_balanced(shards: int, members: int) -> None:
    names = [f"host{i}/{100 + i}" for i in range(members)]
    mine = assign(shards, names)
    owned = sorted(k for ks in mine.values() for k in ks)
    assert owned == list(range(shards))
    counts = [len(ks) for ks in mine.values()]
    assert max(counts) - min(counts) <= 1
    assert assign(shards, list(reversed(names))) == mine  # order of listing irrelevant


def test_a_member_leaving_moves_only_its_shards_and_a_few_more() -> None:
    names = ["a/1", "b/2", "c/3"]
    before = assign(8, names)
    after = assign(8, ["a/1", "b/2"])
    moved = [k for m in ("a/1", "b/2") for k in before[m] if k not in after[m]]
    assert len(moved) <= 2, (before, after)  # at most a rebalancing step, not a reshuffle
    assert sorted(after["a/1"] + after["b/2"]) == list(range(8))


def test_no_members_no_shards() -> None:
    assert assign(8, []) == {}

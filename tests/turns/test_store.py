"""``TurnVectorStore``, ``Entry`` and ``TurnHit``: the seed's documented behaviour, one by one."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np
import pytest

from tests.turns.fakes import make_turn
from tulip_memory.turns import (
    DimensionMismatchError,
    Entry,
    InvalidVectorError,
    TurnHit,
    TurnVectorStore,
    cosine_similarity,
)


def filled(*vectors: list[float]) -> TurnVectorStore:
    store = TurnVectorStore()
    for i, vector in enumerate(vectors):
        store.add(f"text {i}", vector, make_turn(f"turn {i}"), {"i": i})
    return store


# add / count


def test_add_returns_consecutive_indices_from_zero() -> None:
    store = TurnVectorStore()
    assert [store.add(f"t{i}", [1.0, float(i)], make_turn("x")) for i in range(3)] == [0, 1, 2]
    assert store.count() == 3


def test_metadata_defaults_to_an_empty_dict() -> None:
    store = TurnVectorStore()
    store.add("hello", [1.0, 0.0], make_turn("hello"))
    (hit,) = store.search([1.0, 0.0])
    (entry,) = store.iter_entries()
    assert hit.metadata == {} and entry.metadata == {}


def test_a_new_store_is_empty() -> None:
    store = TurnVectorStore()
    assert store.count() == 0
    assert store.dimension is None
    assert list(store.iter_entries()) == []


# search


def test_hits_are_sorted_by_score_descending() -> None:
    store = filled([1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0])
    hits = store.search([1.0, 0.1], top_k=4)
    assert [h.turn_index for h in hits] == [0, 2, 1, 3]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_scores_are_the_cosine_similarity() -> None:
    vectors = [[1.0, 2.0, 0.5], [-3.0, 0.0, 1.0]]
    store = filled(*vectors)
    for hit in store.search([0.5, 0.5, 0.5]):
        expected = cosine_similarity([0.5, 0.5, 0.5], vectors[hit.turn_index])
        assert hit.score == pytest.approx(expected)
        assert -1.0 <= hit.score <= 1.0


def test_top_k_defaults_to_five() -> None:
    store = filled(*([1.0, float(i)] for i in range(7)))
    assert len(store.search([1.0, 0.0])) == 5


def test_top_k_is_a_maximum() -> None:
    store = filled([1.0, 0.0], [0.0, 1.0])
    assert len(store.search([1.0, 0.0], top_k=2)) == 2
    assert len(store.search([1.0, 0.0], top_k=1)) == 1
    assert len(store.search([1.0, 0.0], top_k=10)) == 2


@pytest.mark.parametrize("top_k", [0, -3])
def test_top_k_below_one_returns_nothing(top_k: int) -> None:
    assert filled([1.0, 0.0]).search([1.0, 0.0], top_k=top_k) == []


def test_threshold_excludes_hits_below_it() -> None:
    store = filled([1.0, 0.0], [1.0, 1.0], [0.0, 1.0])
    hits = store.search([1.0, 0.0], threshold=0.5)
    assert [h.turn_index for h in hits] == [0, 1]
    assert all(h.score >= 0.5 for h in hits)


def test_threshold_keeps_a_hit_exactly_at_it() -> None:
    store = filled([0.0, 1.0], [1.0, 0.0])
    assert [h.turn_index for h in store.search([1.0, 0.0], threshold=0.0)] == [1, 0]


def test_no_threshold_means_no_floor() -> None:
    store = filled([1.0, 0.0], [-1.0, 0.0])
    hits = store.search([1.0, 0.0], threshold=None)
    assert [h.score for h in hits] == pytest.approx([1.0, -1.0])


def test_empty_store_returns_an_empty_list() -> None:
    assert TurnVectorStore().search([1.0, 2.0]) == []


def test_all_hits_below_threshold_return_an_empty_list() -> None:
    assert filled([1.0, 0.0], [0.0, 1.0]).search([-1.0, -1.0], threshold=0.1) == []


def test_equal_scores_rank_in_insertion_order() -> None:
    store = filled([1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [2.0, 0.0])
    assert [h.turn_index for h in store.search([1.0, 0.0], top_k=2)] == [0, 2]
    assert [h.turn_index for h in store.search([1.0, 0.0], top_k=3)] == [0, 2, 3]


def test_a_zero_vector_scores_zero() -> None:
    store = filled([0.0, 0.0], [1.0, 0.0])
    assert {h.turn_index: h.score for h in store.search([1.0, 0.0])}[0] == 0.0


def test_search_agrees_with_pairwise_cosine_on_random_vectors() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(300, 16))
    store = TurnVectorStore()
    for i, vector in enumerate(vectors):
        store.add(str(i), vector, make_turn(str(i)))
    query = rng.normal(size=16)
    expected = sorted(range(300), key=lambda i: -cosine_similarity(query, vectors[i]))[:10]
    hits = store.search(query, top_k=10)
    assert [h.turn_index for h in hits] == expected


# TurnHit


def test_a_hit_carries_what_was_added() -> None:
    store = TurnVectorStore()
    store.add("other", [0.0, 1.0], make_turn("other"))
    turn = make_turn("the answer", role="assistant", timestamp=12.5)
    index = store.add("question\nthe answer", [1.0, 0.0], turn, {"user_id": "u1"})
    hit = store.search([1.0, 0.0], top_k=1)[0]
    assert hit == TurnHit(
        score=pytest.approx(1.0),  # type: ignore[arg-type]
        turn=turn,
        turn_index=index,
        text="question\nthe answer",
        metadata={"user_id": "u1"},
    )


def test_a_hit_is_frozen() -> None:
    hit = filled([1.0]).search([1.0])[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        hit.score = 0.0  # type: ignore[misc]


def test_turn_hit_fields_follow_the_seed_order() -> None:
    names = [f.name for f in dataclasses.fields(TurnHit)]
    assert names == ["score", "turn", "turn_index", "text", "metadata"]


# iter_entries / Entry


def test_entries_come_in_insertion_order_with_their_fields() -> None:
    store = TurnVectorStore()
    store.add("a", [1.0, 2.0], make_turn("A"), {"k": 1})
    store.add("b", [3.0, 4.0], make_turn("B"))
    assert list(store.iter_entries()) == [
        Entry("a", [1.0, 2.0], make_turn("A"), {"k": 1}),
        Entry("b", [3.0, 4.0], make_turn("B"), {}),
    ]


def test_entry_is_a_named_tuple_in_seed_order() -> None:
    entry = Entry(text="t", embedding=[1.0], turn={}, metadata={})
    assert isinstance(entry, tuple)
    assert Entry._fields == ("text", "embedding", "turn", "metadata")


def test_embeddings_come_back_exactly_as_list_of_float() -> None:
    vector = [0.1, 1 / 3, -2.5e-8, 12345.678901234]
    float32 = np.array([0.1, 0.2], dtype=np.float32)
    store = TurnVectorStore()
    store.add("a", vector, make_turn("a"))
    store.add("b", np.array(vector), make_turn("b"))
    entries = list(store.iter_entries())
    assert entries[0].embedding == vector and entries[1].embedding == vector
    assert all(type(x) is float for x in entries[0].embedding)
    narrow = TurnVectorStore()
    narrow.add("c", float32, make_turn("c"))
    assert next(narrow.iter_entries()).embedding == float32.tolist()


def test_iteration_is_a_snapshot() -> None:
    store = filled([1.0, 0.0], [0.0, 1.0])
    entries = store.iter_entries()
    first = next(entries)
    store.clear()
    store.add("new", [5.0, 5.0, 5.0], make_turn("new"))
    assert [first, *entries] == [
        Entry("text 0", [1.0, 0.0], make_turn("turn 0"), {"i": 0}),
        Entry("text 1", [0.0, 1.0], make_turn("turn 1"), {"i": 1}),
    ]


def test_a_snapshot_survives_the_buffer_growing() -> None:
    store = filled(*([float(i), 1.0] for i in range(16)))
    entries = store.iter_entries()
    first = next(entries)
    for i in range(100):
        store.add("more", [1.0, float(i)], make_turn("more"))
    rest = list(entries)
    assert [e.embedding for e in [first, *rest]] == [[float(i), 1.0] for i in range(16)]
    assert store.count() == 116


# copies


def test_the_store_keeps_its_own_copy_of_turn_and_metadata() -> None:
    turn, metadata = make_turn("original"), {"tags": ["a"]}
    store = TurnVectorStore()
    store.add("original", [1.0], turn, metadata)
    turn["content"][0]["text"] = "changed"
    metadata["tags"].append("b")
    hit = store.search([1.0])[0]
    hit.turn["role"] = "changed"
    next(store.iter_entries()).metadata["tags"].append("c")
    (entry,) = store.iter_entries()
    assert entry.turn == make_turn("original")
    assert entry.metadata == {"tags": ["a"]}


# clear


def test_clear_empties_the_store() -> None:
    store = filled([1.0, 0.0], [0.0, 1.0])
    store.clear()
    assert store.count() == 0
    assert store.search([1.0, 0.0]) == []
    assert list(store.iter_entries()) == []


def test_after_clear_indices_restart_and_a_new_width_is_allowed() -> None:
    store = filled([1.0, 0.0])
    store.clear()
    assert store.dimension is None
    assert store.add("wide", [1.0, 2.0, 3.0], make_turn("wide")) == 0
    assert store.dimension == 3


# dimensions and invalid vectors


def test_a_vector_of_another_width_is_refused_and_nothing_is_stored() -> None:
    store = filled([1.0, 0.0])
    with pytest.raises(DimensionMismatchError) as caught:
        store.add("bad", [1.0, 0.0, 0.0], make_turn("bad"))
    assert (caught.value.expected, caught.value.actual) == (2, 3)
    assert "3 dimensions, expected 2" in str(caught.value)
    assert store.count() == 1
    assert [e.text for e in store.iter_entries()] == ["text 0"]


def test_a_query_of_another_width_is_refused() -> None:
    with pytest.raises(DimensionMismatchError, match="query embedding has 3 dimensions"):
        filled([1.0, 0.0]).search([1.0, 0.0, 0.0])


@pytest.mark.parametrize(
    "vector",
    [
        [],
        [1.0, float("nan")],
        [float("inf"), 0.0],
        [[1.0, 0.0], [0.0, 1.0]],
        ["not", "numbers"],
    ],
)
def test_invalid_vectors_are_refused(vector: Any) -> None:
    store = TurnVectorStore()
    with pytest.raises(InvalidVectorError):
        store.add("x", vector, make_turn("x"))
    with pytest.raises(InvalidVectorError):
        filled([1.0, 0.0]).search(vector)
    assert store.count() == 0


# concurrency


def test_concurrent_adds_get_distinct_indices() -> None:
    store = TurnVectorStore()
    indices: list[int] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        for i in range(200):
            index = store.add(f"{offset}-{i}", [1.0, float(i)], make_turn("x"))
            with lock:
                indices.append(index)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(indices) == list(range(800))
    assert store.count() == 800
    texts = [e.text for e in store.iter_entries()]
    assert len(set(texts)) == 800

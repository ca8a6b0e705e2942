"""The numpy ranking behind ``TurnVectorStore.search``, against a plain-Python reference."""

from __future__ import annotations

import numpy as np
import pytest

from tulip_memory.turns.ranking import cosine_scores, top_k_indices


def reference_top_k(scores: list[float], top_k: int, threshold: float | None) -> list[int]:
    kept = [i for i, s in enumerate(scores) if threshold is None or s >= threshold]
    return sorted(kept, key=lambda i: (-scores[i], i))[: max(top_k, 0)]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("top_k", [0, 1, 3, 10, 50, 500])
@pytest.mark.parametrize("threshold", [None, 0.0, 2.0])
def test_matches_a_full_sort_with_ties_in_index_order(
    seed: int, top_k: int, threshold: float | None
) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.integers(-3, 4, size=120).astype(np.float64)  # many ties
    got = top_k_indices(scores, top_k, threshold).tolist()
    assert got == reference_top_k(scores.tolist(), top_k, threshold)


def test_threshold_keeps_equal_scores() -> None:
    scores = np.array([0.5, 0.4999, 0.7])
    assert top_k_indices(scores, 5, 0.5).tolist() == [2, 0]


def test_negative_top_k_selects_nothing() -> None:
    assert top_k_indices(np.array([1.0, 0.5]), -1).tolist() == []


def test_cosine_scores_of_zero_vectors_are_zero() -> None:
    rows = np.array([[0.0, 0.0], [3.0, 4.0]])
    norms = np.linalg.norm(rows, axis=1)
    assert cosine_scores(rows, norms, np.array([3.0, 4.0])).tolist() == [0.0, 1.0]
    assert cosine_scores(rows, norms, np.zeros(2)).tolist() == [0.0, 0.0]


def test_cosine_scores_are_clipped_and_never_nan() -> None:
    rows = np.array([[1e200, 1e200], [1.0, 1.0]])
    with np.errstate(over="ignore"):
        norms = np.linalg.norm(rows, axis=1)  # [inf, sqrt(2)]
    scores = cosine_scores(rows, norms, np.array([1e200, 1e200]))
    assert np.isfinite(scores).all()
    assert ((scores >= -1.0) & (scores <= 1.0)).all()

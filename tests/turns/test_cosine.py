"""``cosine_similarity``: the seed's contract for two vectors."""

from __future__ import annotations

import numpy as np
import pytest

from tulip_memory.errors import TulipMemoryError
from tulip_memory.turns import DimensionMismatchError, InvalidVectorError, cosine_similarity


def test_identical_vectors_score_one() -> None:
    assert cosine_similarity([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == pytest.approx(1.0)


def test_opposite_vectors_score_minus_one() -> None:
    assert cosine_similarity([1.0, -2.0], [-1.0, 2.0]) == pytest.approx(-1.0)


def test_orthogonal_vectors_score_zero() -> None:
    assert cosine_similarity([1.0, 0.0], [0.0, 5.0]) == 0.0


def test_magnitude_does_not_matter() -> None:
    assert cosine_similarity([1.0, 2.0], [10.0, 20.0]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("a", "b"),
    [([0.0, 0.0], [1.0, 2.0]), ([1.0, 2.0], [0.0, 0.0]), ([0.0], [0.0]), ([], [])],
)
def test_zero_magnitude_scores_zero(a: list[float], b: list[float]) -> None:
    assert cosine_similarity(a, b) == 0.0


def test_different_lengths_are_refused() -> None:
    with pytest.raises(DimensionMismatchError) as caught:
        cosine_similarity([1.0, 2.0, 3.0], [1.0, 2.0])
    assert (caught.value.expected, caught.value.actual) == (3, 2)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, TulipMemoryError)


def test_non_finite_values_are_refused() -> None:
    with pytest.raises(InvalidVectorError, match="NaN or infinite"):
        cosine_similarity([1.0, float("nan")], [1.0, 2.0])


def test_numpy_arrays_are_accepted() -> None:
    a = np.array([0.6, 0.8], dtype=np.float32)
    assert cosine_similarity(a, np.array([0.6, 0.8])) == pytest.approx(1.0)


def test_scores_stay_within_bounds() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        a = rng.normal(size=8)
        assert -1.0 <= cosine_similarity(a, a) <= 1.0
        assert -1.0 <= cosine_similarity(a, -a) <= 1.0

"""Vectors as float64 numpy arrays: one validation path, and cosine similarity of two.

float64 so a stored embedding comes back exactly as it was given (Python floats are
float64; float32 model output widens without loss).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tulip_memory.turns.errors import DimensionMismatchError, InvalidVectorError

Vector = npt.NDArray[np.float64]
Matrix = npt.NDArray[np.float64]
VectorLike = Sequence[float] | npt.NDArray[Any]


def as_vector(value: VectorLike, what: str, *, allow_empty: bool = False) -> Vector:
    """``value`` as a finite 1-D float64 array, or :class:`InvalidVectorError`."""
    try:
        vector = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InvalidVectorError(f"{what} is not a vector of numbers: {e}") from e
    if vector.ndim != 1:
        raise InvalidVectorError(f"{what} must be 1-D, got shape {vector.shape}")
    if vector.size == 0 and not allow_empty:
        raise InvalidVectorError(f"{what} is empty")
    if not np.isfinite(vector).all():
        raise InvalidVectorError(f"{what} contains NaN or infinite values")
    return vector


def cosine_similarity(a: VectorLike, b: VectorLike) -> float:
    """Cosine similarity of two equal-length vectors, in [-1.0, 1.0].

    0.0 when either vector has zero magnitude; :class:`DimensionMismatchError` when
    the lengths differ.
    """
    x = as_vector(a, "a", allow_empty=True)
    y = as_vector(b, "b", allow_empty=True)
    if x.size != y.size:
        raise DimensionMismatchError("b", expected=x.size, actual=y.size)
    denominator = float(np.linalg.norm(x)) * float(np.linalg.norm(y))
    if denominator == 0.0:
        return 0.0
    return clip_score(float(x @ y) / denominator)


def clip_score(score: float) -> float:
    """``score`` inside [-1.0, 1.0]; rounding can leave a cosine a hair outside."""
    return min(1.0, max(-1.0, score))

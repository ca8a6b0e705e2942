"""Exact cosine ranking on numpy: one matrix-vector product, then a partial sort.

Pure functions over arrays; the store supplies its rows, their norms and the query.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tulip_memory.turns.vectors import Matrix, Vector

Indices = npt.NDArray[np.intp]


def cosine_scores(rows: Matrix, norms: Vector, query: Vector) -> Vector:
    """Cosine similarity of each row to ``query``, clipped to [-1, 1]; 0.0 for zero vectors."""
    # Overflowing norms (absurd inputs) give inf/inf: score those 0.0, never NaN.
    with np.errstate(over="ignore", invalid="ignore"):
        denominators = norms * float(np.linalg.norm(query))
        dots = rows @ query
        scores = np.zeros_like(dots)
        np.divide(dots, denominators, out=scores, where=denominators > 0)
    return np.clip(np.nan_to_num(scores, nan=0.0), -1.0, 1.0)


def top_k_indices(scores: Vector, top_k: int, threshold: float | None = None) -> Indices:
    """Indices of the ``top_k`` best scores at or above ``threshold``, best first.

    Equal scores rank in index (insertion) order, so results are deterministic.
    ``top_k <= 0`` selects nothing.
    """
    if top_k <= 0:
        return np.empty(0, dtype=np.intp)
    candidates = (
        np.arange(scores.size) if threshold is None else np.flatnonzero(scores >= threshold)
    )
    if candidates.size > top_k:
        candidates = _best_with_ties(candidates, scores[candidates], top_k)
    order = np.lexsort((candidates, -scores[candidates]))
    return candidates[order][:top_k]


def _best_with_ties(candidates: Indices, scores: Vector, top_k: int) -> Indices:
    """The candidates scoring at least the ``top_k``-th best score (ties included), O(n)."""
    kth_best = float(scores[np.argpartition(scores, -top_k)[-top_k]])
    kept: Indices = candidates[scores >= kth_best]
    return kept

"""Reciprocal-rank fusion: one ranking from several whose scores don't compare.

A bm25 score and a cosine similarity live on different scales, so the rankings are
fused by position only (Cormack, Clarke & Büttcher, SIGIR 2009): an item at 1-based
rank ``r`` of list ``i`` earns ``weights[i] / (k + r)``, summed over the lists it is
in. ``k`` damps the head of each list, so an item two lists agree on beats one that
only a single list puts first.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

#: The constant of the original paper; robust across collections.
DEFAULT_K = 60


def fuse(
    rankings: Sequence[Sequence[K]],
    k: int = DEFAULT_K,
    weights: Sequence[float] | None = None,
) -> list[K]:
    """Every key of ``rankings``, best fused score first.

    Ties go to the key met first when the lists are read rank by rank (rank 1 of
    every list, in list order, then rank 2, ...), so the result is deterministic and
    earlier lists win ties. A key repeated within one list counts at its best rank.

    Raises:
        ValueError: ``k`` is negative, or ``weights`` does not match ``rankings``
            or holds a negative or non-finite weight.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    ws = _weights(rankings, weights)
    scores: dict[K, float] = {}
    for ranking, weight in zip(rankings, ws, strict=True):
        for rank, key in enumerate(dict.fromkeys(ranking), start=1):
            scores[key] = scores.get(key, 0.0) + weight / (k + rank)
    order = {key: i for i, key in enumerate(_first_seen(rankings))}
    return sorted(scores, key=lambda key: (-scores[key], order[key]))


def _weights(rankings: Sequence[Sequence[K]], weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"got {len(weights)} weights for {len(rankings)} rankings")
    out = [float(w) for w in weights]
    if not all(0.0 <= w < float("inf") for w in out):
        raise ValueError(f"weights must be finite and >= 0, got {list(weights)}")
    return out


def _first_seen(rankings: Sequence[Sequence[K]]) -> list[K]:
    """Keys in the order a rank-by-rank reading of the lists meets them."""
    deduped = [list(dict.fromkeys(r)) for r in rankings]
    depth = max((len(r) for r in deduped), default=0)
    met = [r[rank] for rank in range(depth) for r in deduped if rank < len(r)]
    return list(dict.fromkeys(met))

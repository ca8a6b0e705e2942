"""Fusing rankings whose scores don't compare: a bm25 score and a cosine similarity.

:func:`fuse` is reciprocal-rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009), by
position only: an item at 1-based rank ``r`` of list ``i`` earns ``weights[i] / (k +
r)``, summed over the lists it is in; ``k`` damps the head of each list, so an item two
lists agree on beats one that only a single list puts first. ``HolographicStore`` uses
it. :class:`HybridRanking` holds the weights of the convex combination of normalised
scores that ``PgMemory`` computes in SQL, and the same formula as a plain function.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

#: The constant of the original paper; robust across collections.
DEFAULT_K = 60


def _finite_non_negative(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


@dataclass(frozen=True, kw_only=True)
class HybridRanking:
    """How ``PgMemory`` fuses the lexical (bm25) and vector scores of a scope's rows.

    A convex combination of normalised scores (Bruch, Gai & Ingber, "An Analysis of
    Fusion Functions for Hybrid Retrieval", ACM TOIS 2023: better than reciprocal-rank
    fusion once its one weight is tuned, and it keeps how far apart two scores are)::

        fused = lexical_weight * bm25 / max(bm25 over the scope)
              + vector_weight  * (1 + cosine) / 2

    A row without a lexical match, or without a vector, scores 0 on that side. ``k1``
    and ``b`` are bm25's term-frequency saturation and document-length normalisation.
    A weight of 0 turns a side off: ``vector_weight=0`` ranks by bm25 alone and never
    embeds the query; ``lexical_weight=0`` is exact cosine order.

    The defaults suit a semantic encoder (a litellm model, sentence-transformers) and
    were tuned on three of the ten LoCoMo conversations (``bench/recall_quality.py``);
    :data:`WORD_HASHING` is the ranking for encoders that hash words.
    """

    lexical_weight: float = 0.2
    vector_weight: float = 0.8
    k1: float = 1.2
    b: float = 0.4

    def __post_init__(self) -> None:
        for name in ("lexical_weight", "vector_weight", "k1"):
            value = getattr(self, name)
            if not _finite_non_negative(value):
                raise ValueError(f"HybridRanking.{name} must be finite and >= 0, got {value!r}")
        if self.lexical_weight == 0 and self.vector_weight == 0:
            raise ValueError("HybridRanking needs a weight above 0 for at least one side")
        if not (_finite_non_negative(self.b) and self.b <= 1):
            raise ValueError(f"HybridRanking.b must be within [0, 1], got {self.b!r}")

    def score(self, bm25: float | None, max_bm25: float | None, distance: float | None) -> float:
        """The fused score of one row: the formula the Postgres statement computes.

        ``bm25`` is ``None`` for a row without a lexical match, ``distance`` (cosine
        distance) ``None`` for a row or query without a vector."""
        lexical = 0.0 if bm25 is None or not max_bm25 else bm25 / max_bm25
        vector = 0.0 if distance is None else 1.0 - distance / 2.0
        return self.lexical_weight * lexical + self.vector_weight * vector


#: For encoders that hash the words of a text (``HashingEmbedder``, ``HRREncoder``):
#: their similarity re-counts the words bm25 already ranks, without bm25's idf, so the
#: vector side only breaks near-ties. On the LoCoMo tuning set such a vector finds 2%
#: of the evidence turns bm25 misses in its top 10, and the weights that suit a
#: semantic encoder (vector 4x lexical) cost it 2 points of hit@10.
WORD_HASHING = HybridRanking(lexical_weight=0.9, vector_weight=0.1)


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

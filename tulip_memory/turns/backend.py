"""What ``Memory`` needs from an embedder, and the checks on what one returns.

The seed's ``EmbeddingBackend`` embeds a batch of texts, sync and async. The repo's
:class:`~tulip_memory.embeddings.BaseEmbedding` (``embed`` / ``aembed`` returning an
``(n, d)`` float32 array) satisfies the protocol as it is, and so does a seed-style
backend returning ``list[list[float]]``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from tulip_memory.errors import EmbeddingError
from tulip_memory.turns.vectors import Matrix, Vector


class EmbeddingBackend(Protocol):
    """Embeds texts in one batch; row ``i`` of the answer is the vector of ``texts[i]``."""

    def embed(self, texts: list[str]) -> npt.ArrayLike: ...

    async def aembed(self, texts: list[str]) -> npt.ArrayLike: ...


def embedded_rows(vectors: npt.ArrayLike, count: int) -> Matrix:
    """A backend's answer for ``count`` texts as a finite ``(count, d)`` float64 matrix.

    Anything else raises :class:`~tulip_memory.errors.EmbeddingError`.
    """
    try:
        matrix = np.asarray(vectors, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise EmbeddingError(f"embedding backend returned no matrix of numbers: {e}") from e
    if matrix.ndim != 2 or matrix.shape[0] != count or matrix.shape[1] == 0:
        raise EmbeddingError(
            f"embedding backend returned shape {matrix.shape} for {count} texts, "
            f"expected ({count}, dimension)"
        )
    if not np.isfinite(matrix).all():
        raise EmbeddingError("embedding backend returned NaN or infinite values")
    return matrix


def embedded_vector(vectors: npt.ArrayLike) -> Vector:
    """A backend's answer for one text, as its single vector."""
    vector: Vector = embedded_rows(vectors, 1)[0]
    return vector

"""The embedder contract: a fixed dimension and batch ``embed`` / ``aembed``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tulip_memory._portal import shared_portal
from tulip_memory.errors import EmbeddingError

Vectors = npt.NDArray[np.float32]


class BaseEmbedding(ABC):
    """Turns texts into vectors of :attr:`dimension` floats.

    Implementations provide the async batch :meth:`aembed`; the sync :meth:`embed`
    is generated from it (pure-CPU encoders override :meth:`embed` instead and
    leave :meth:`aembed` delegating to it).
    """

    @property
    @abstractmethod
    def dimension(self) -> int:
        """Width of every vector this embedder returns."""

    @property
    @abstractmethod
    def model(self) -> str:
        """A stable name of the model; part of every cache key."""

    @abstractmethod
    async def aembed(self, texts: Sequence[str]) -> Vectors:
        """Embed ``texts`` in as few calls as the provider allows; shape (n, dimension)."""

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Blocking :meth:`aembed`."""
        return shared_portal().call(self.aembed(texts))

    def check(self, vectors: Vectors, count: int) -> Vectors:
        """Validate a provider's answer: shape, and no NaN or infinity."""
        if vectors.shape != (count, self.dimension):
            raise EmbeddingError(
                f"{self.model} returned vectors of shape {vectors.shape}, "
                f"expected ({count}, {self.dimension})"
            )
        if not np.isfinite(vectors).all():
            raise EmbeddingError(f"{self.model} returned NaN or infinite values")
        return vectors

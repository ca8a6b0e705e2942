"""Holographic reduced representation (HRR) phase encoding, the stores' offline default.

Each token owns a deterministic random phase vector; a text is the bundle (sum of unit
phasors) of its tokens, reduced back to phases ``φ``. The vector stored is
``[cos φ, sin φ] / sqrt(dim)``: unit length, and the cosine of two such vectors is
the mean of ``cos(φa - φb)``, which grows with the tokens the texts share. Lexical and
associative, not trained semantics.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from tulip_memory.embeddings.base import BaseEmbedding, Vectors

_TOKEN = re.compile(r"\w+", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens."""
    return _TOKEN.findall(text.lower())


@lru_cache(maxsize=65536)
def _token_phases(token: str, dim: int) -> npt.NDArray[np.float64]:
    seed = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
    return np.random.default_rng(seed).uniform(0.0, 2 * np.pi, dim)


class HRREncoder(BaseEmbedding):
    """``[cos φ, sin φ]`` encoding, ``2 * dim`` wide; a text without tokens is all zeros."""

    def __init__(self, dim: int = 512) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self.dim = dim

    @property
    def dimension(self) -> int:
        return 2 * self.dim

    @property
    def model(self) -> str:
        return f"hrr-{self.dim}"

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            tokens = tokenize(text)
            if not tokens:
                continue
            bundle = np.zeros(self.dim, dtype=np.complex128)
            for tok in tokens:
                bundle += np.exp(1j * _token_phases(tok, self.dim))
            phase = np.angle(bundle)
            scale = 1.0 / np.sqrt(self.dim)
            out[i, : self.dim] = np.cos(phase) * scale
            out[i, self.dim :] = np.sin(phase) * scale
        return out

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return self.embed(texts)

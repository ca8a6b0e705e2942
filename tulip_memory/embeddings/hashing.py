"""Feature hashing, the offline embedder with no model to download.

Each lower-cased word and each pair of adjacent words is hashed (blake2b) to a bucket
and a sign; a text is the signed sum of its features weighted ``1 + log(count)``,
scaled to unit length. Two texts are close when they share words and word pairs:
lexical, not semantic, but deterministic across processes and machines, which is what
tests, fakes and the no-provider default need.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from tulip_memory.embeddings.base import BaseEmbedding, Vectors

_TOKEN = re.compile(r"\w+", re.UNICODE)
_SIGN_BIT = np.uint64(63)


def features(text: str) -> Iterator[str]:
    """Lower-cased word unigrams, then adjacent-word bigrams (joined by a space).

    Tokens never contain a space, so a bigram can never collide with a unigram.
    """
    tokens = _TOKEN.findall(text.lower())
    yield from tokens
    for left, right in itertools.pairwise(tokens):
        yield f"{left} {right}"


@lru_cache(maxsize=1 << 18)
def _feature_hash(feature: str) -> int:
    """64 stable bits per feature; cached because vocabularies repeat a lot."""
    return int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")


class HashingEmbedder(BaseEmbedding):
    """Signed feature hashing into ``dimension`` buckets; a text without words is all zeros."""

    def __init__(self, dimension: int = 384) -> None:
        if dimension < 1:
            raise ValueError(f"dimension must be >= 1, got {dimension}")
        self._dimension = dimension

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def model(self) -> str:
        return f"hashing-{self._dimension}"

    def embed(self, texts: Sequence[str]) -> Vectors:
        rows, hashes, weights = _sparse_counts(texts)
        buckets = (hashes % np.uint64(self._dimension)).astype(np.intp)
        signs = np.where((hashes >> _SIGN_BIT) == 1, -1.0, 1.0)
        out = np.zeros((len(texts), self._dimension), dtype=np.float64)
        np.add.at(out, (rows, buckets), signs * weights)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out.astype(np.float32)

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        return self.embed(texts)


def _sparse_counts(
    texts: Sequence[str],
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.uint64], npt.NDArray[np.float64]]:
    """COO triplets ``(row, feature hash, 1 + log(count))`` over all texts."""
    rows: list[int] = []
    hashes: list[int] = []
    counts: list[int] = []
    for row, text in enumerate(texts):
        for feature, count in Counter(features(text)).items():
            rows.append(row)
            hashes.append(_feature_hash(feature))
            counts.append(count)
    weights = 1.0 + np.log(np.asarray(counts, dtype=np.float64))
    return (
        np.asarray(rows, dtype=np.intp),
        np.asarray(hashes, dtype=np.uint64),
        weights,
    )

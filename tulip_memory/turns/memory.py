"""``Memory``: an embedding backend and a ``TurnVectorStore`` behind index / search / reindex.

Sync and async entry points share one implementation: each public method is the
backend call (``embed`` or ``aembed``) and a call to the same private step, so the
two can differ in nothing but that I/O line.
"""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

from tulip_memory.turns.backend import EmbeddingBackend, embedded_rows, embedded_vector
from tulip_memory.turns.models import TurnHit, turn_text
from tulip_memory.turns.store import TurnVectorStore


class Memory:
    """Semantic recall over completed conversation turns.

    ``index_turn`` / ``aindex_turn`` embed ``turn["content"][0]["text"]``;
    ``index_turn_text`` / ``aindex_turn_text`` embed a caller-supplied text (e.g. the
    Q+A pair ``f"{prompt}\\n{response}"``) while storing the structured turn.

    Args:
        embeddings: any :class:`EmbeddingBackend`, including every
            :class:`~tulip_memory.embeddings.BaseEmbedding`.
        store: the store to use; defaults to a fresh one. Public and settable, so a
            store loaded from Parquet can be swapped in.
    """

    def __init__(self, embeddings: EmbeddingBackend, store: TurnVectorStore | None = None) -> None:
        self._embeddings = embeddings
        self.store: TurnVectorStore = store if store is not None else TurnVectorStore()

    @property
    def embeddings(self) -> EmbeddingBackend:
        """The backend that embeds new turns and queries."""
        return self._embeddings

    def index_turn(self, turn: dict[str, Any], metadata: dict[str, Any] | None = None) -> int:
        """Embed ``turn["content"][0]["text"]``, store the turn, return its index."""
        return self.index_turn_text(turn_text(turn), turn, metadata)

    def index_turn_text(
        self, text: str, turn: dict[str, Any], metadata: dict[str, Any] | None = None
    ) -> int:
        """Embed ``text``, store it with ``turn`` and ``metadata``, return the index."""
        return self._store(text, self._embeddings.embed([text]), turn, metadata)

    async def aindex_turn(
        self, turn: dict[str, Any], metadata: dict[str, Any] | None = None
    ) -> int:
        """Async variant of :meth:`index_turn`."""
        return await self.aindex_turn_text(turn_text(turn), turn, metadata)

    async def aindex_turn_text(
        self, text: str, turn: dict[str, Any], metadata: dict[str, Any] | None = None
    ) -> int:
        """Async variant of :meth:`index_turn_text`."""
        return self._store(text, await self._embeddings.aembed([text]), turn, metadata)

    def search(self, query: str, top_k: int = 5, threshold: float | None = None) -> list[TurnHit]:
        """Embed ``query``; hits sorted by score descending (see ``TurnVectorStore.search``).

        An empty store or ``top_k <= 0`` answers ``[]`` without calling the backend.
        """
        if self._nothing_to_find(top_k):
            return []
        return self._rank(self._embeddings.embed([query]), top_k, threshold)

    async def asearch(
        self, query: str, top_k: int = 5, threshold: float | None = None
    ) -> list[TurnHit]:
        """Async variant of :meth:`search`."""
        if self._nothing_to_find(top_k):
            return []
        return self._rank(await self._embeddings.aembed([query]), top_k, threshold)

    def reindex(self, new_embeddings: EmbeddingBackend) -> None:
        """Re-embed every stored text with ``new_embeddings`` and search with it from now on.

        Texts, turns, metadata and order are kept verbatim. All texts go to the new
        backend in one batch, and its answer is checked before the store is touched:
        if the backend fails, the store and the current backend stay as they were.
        Indexing concurrently with a reindex is not supported (those turns may be lost).
        """
        entries = list(self.store.iter_entries())
        if entries:
            vectors = embedded_rows(new_embeddings.embed([e.text for e in entries]), len(entries))
            self.store.clear()
            for entry, vector in zip(entries, vectors, strict=True):
                self.store.add(entry.text, vector, entry.turn, entry.metadata)
        self._embeddings = new_embeddings

    def count(self) -> int:
        """Number of turns currently indexed."""
        return self.store.count()

    def clear(self) -> None:
        """Remove all indexed turns."""
        self.store.clear()

    def _store(
        self,
        text: str,
        vectors: npt.ArrayLike,
        turn: dict[str, Any],
        metadata: dict[str, Any] | None,
    ) -> int:
        return self.store.add(text, embedded_vector(vectors), turn, metadata)

    def _nothing_to_find(self, top_k: int) -> bool:
        return top_k <= 0 or self.store.count() == 0

    def _rank(self, vectors: npt.ArrayLike, top_k: int, threshold: float | None) -> list[TurnHit]:
        return self.store.search(embedded_vector(vectors), top_k, threshold)

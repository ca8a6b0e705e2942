"""``TurnVectorStore``: append-only, in memory, exact cosine search; safe across threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from copy import deepcopy
from typing import Any, NamedTuple

from tulip_memory.turns.matrix import VectorMatrix
from tulip_memory.turns.models import Entry, TurnHit
from tulip_memory.turns.ranking import cosine_scores, top_k_indices
from tulip_memory.turns.vectors import Matrix, VectorLike, as_vector


class StoreColumns(NamedTuple):
    """A store's contents column by column; the bulk path of persist and load."""

    texts: list[str]
    vectors: Matrix
    turns: list[dict[str, Any]]
    metadata: list[dict[str, Any]]


class TurnVectorStore:
    """Append-only in-memory store of embedded turns with cosine search.

    ``add()`` returns the index of the appended entry; that index is preserved on
    the corresponding :class:`TurnHit` returned by :meth:`search`. Vectors live in
    one float64 matrix, so a search is one matrix-vector product plus a partial
    sort: O(N) over all entries, adequate for Tier 1 scale.

    Every vector of a store has the width of the first one added (until
    :meth:`clear`); others are refused with ``DimensionMismatchError``. Turns and
    metadata are copied in and out, so neither the caller nor a hit's reader can
    change what is stored.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._texts: list[str] = []
        self._turns: list[dict[str, Any]] = []
        self._metadata: list[dict[str, Any]] = []
        self._vectors = VectorMatrix()

    @property
    def dimension(self) -> int | None:
        """Width of the stored vectors, or ``None`` while the store is empty."""
        return self._vectors.width

    def add(
        self,
        text: str,
        embedding: VectorLike,
        turn: dict[str, Any],
        metadata: dict[str, Any] | None = None,
    ) -> int:
        """Append an entry and return its integer index; ``metadata`` defaults to ``{}``."""
        vector = as_vector(embedding, "embedding")
        stored_turn = deepcopy(turn)
        stored_metadata = deepcopy(metadata) if metadata is not None else {}
        with self._lock:
            index = self._vectors.append(vector)  # refuses a wrong width before any list grows
            self._texts.append(text)
            self._turns.append(stored_turn)
            self._metadata.append(stored_metadata)
        return index

    def search(
        self,
        query_embedding: VectorLike,
        top_k: int = 5,
        threshold: float | None = None,
    ) -> list[TurnHit]:
        """Up to ``top_k`` hits ranked by cosine similarity, best first.

        Hits scoring below ``threshold`` are excluded (``None``: no floor). Empty when
        the store is empty, ``top_k <= 0`` or every score is below ``threshold``.
        Equal scores rank in insertion order.
        """
        query = as_vector(query_embedding, "query embedding")
        with self._lock:
            if top_k <= 0 or not self._texts:
                return []
            self._vectors.require_width(query.size, "query embedding")
            scores = cosine_scores(self._vectors.rows(), self._vectors.norms(), query)
            picked = top_k_indices(scores, top_k, threshold)
            return [self._hit(int(index), float(scores[index])) for index in picked]

    def iter_entries(self) -> Iterator[Entry]:
        """Yield every entry as an :class:`Entry`, in insertion order (a snapshot)."""
        with self._lock:
            snapshot = list(
                zip(self._texts, self._vectors.rows(), self._turns, self._metadata, strict=True)
            )
        for text, vector, turn, metadata in snapshot:
            yield Entry(text, vector.tolist(), deepcopy(turn), deepcopy(metadata))

    def count(self) -> int:
        """Number of entries currently in the store."""
        return len(self._texts)

    def clear(self) -> None:
        """Remove all entries; the next ``add`` may start a new vector width."""
        with self._lock:
            self._texts = []
            self._turns = []
            self._metadata = []
            self._vectors.clear()

    def _columns(self) -> StoreColumns:
        """Everything stored, for persistence: no copies, so the dicts must not be mutated."""
        with self._lock:
            return StoreColumns(
                list(self._texts), self._vectors.rows(), list(self._turns), list(self._metadata)
            )

    @classmethod
    def _from_columns(cls, columns: StoreColumns) -> TurnVectorStore:
        """A store owning ``columns`` (freshly decoded values: taken, not copied)."""
        if len({len(column) for column in columns}) > 1:
            raise ValueError("store columns of different lengths")
        store = cls()
        store._vectors.extend(columns.vectors)
        store._texts = list(columns.texts)
        store._turns = list(columns.turns)
        store._metadata = list(columns.metadata)
        return store

    def _hit(self, index: int, score: float) -> TurnHit:
        return TurnHit(
            score=score,
            turn=deepcopy(self._turns[index]),
            turn_index=index,
            text=self._texts[index],
            metadata=deepcopy(self._metadata[index]),
        )

"""Equal-width vectors kept as one matrix, so ranking is a single matrix-vector product."""

from __future__ import annotations

import numpy as np

from tulip_memory.turns.errors import DimensionMismatchError
from tulip_memory.turns.vectors import Matrix, Vector

_INITIAL_CAPACITY = 16


class VectorMatrix:
    """Rows of one width in a float64 buffer that doubles when full, with each row's norm.

    The width is set by the first row and forgotten by :meth:`clear`. A row below
    ``len(self)`` is never written again (growing copies into a new buffer, ``clear``
    starts a fresh one), so views returned by :meth:`rows` stay valid after later
    appends; ``TurnVectorStore.iter_entries`` relies on that.
    """

    _buffer: Matrix
    _norms: Vector
    _size: int
    _width: int | None

    def __init__(self) -> None:
        self.clear()

    @property
    def width(self) -> int | None:
        """Width of every row, or ``None`` while empty."""
        return self._width

    def __len__(self) -> int:
        return self._size

    def rows(self) -> Matrix:
        """A read-only view of the stored rows, shape ``(len(self), width)``."""
        view = self._buffer[: self._size]
        view.flags.writeable = False
        return view

    def norms(self) -> Vector:
        """The Euclidean norm of each stored row."""
        return self._norms[: self._size]

    def require_width(self, width: int, what: str) -> None:
        """:class:`DimensionMismatchError` unless empty or ``width`` matches the rows."""
        if self._width is not None and width != self._width:
            raise DimensionMismatchError(what, expected=self._width, actual=width)

    def append(self, vector: Vector) -> int:
        """Store ``vector`` as the next row and return its index."""
        self.require_width(vector.size, "embedding")
        self.extend(vector.reshape(1, -1))  # one path, so norms are bit-identical to extend's
        return self._size - 1

    def extend(self, rows: Matrix) -> None:
        """Store every row of the 2-D ``rows`` at once, in order."""
        if not len(rows):
            return
        width = rows.shape[1]
        self.require_width(width, "embeddings")
        self._reserve(self._size + len(rows), width)
        self._buffer[self._size : self._size + len(rows)] = rows
        self._norms[self._size : self._size + len(rows)] = np.linalg.norm(rows, axis=1)
        self._width = width
        self._size += len(rows)

    def clear(self) -> None:
        """Forget every row and the width; a fresh buffer, so earlier views keep their rows."""
        self._buffer = np.empty((0, 0))
        self._norms = np.empty(0)
        self._size = 0
        self._width = None

    def _reserve(self, needed: int, width: int) -> None:
        """Room for ``needed`` rows, doubling so appends stay amortised O(width)."""
        if needed <= len(self._buffer):
            return
        capacity = max(_INITIAL_CAPACITY, 2 * len(self._buffer), needed)
        buffer: Matrix = np.empty((capacity, width))
        norms: Vector = np.empty(capacity)
        if self._size:  # an empty buffer may have no width yet
            buffer[: self._size] = self._buffer[: self._size]
            norms[: self._size] = self._norms[: self._size]
        self._buffer, self._norms = buffer, norms

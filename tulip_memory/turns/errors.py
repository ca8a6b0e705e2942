"""Errors of turn recall, all under :class:`~tulip_memory.errors.TulipMemoryError`.

Each carries what a caller branches on: the ``expected`` and ``actual`` width of a
vector, the ``path`` and ``reason`` of a store file that cannot be loaded, the
``found`` schema version, the ``index`` and ``field`` of an entry JSON cannot hold.
Each also subclasses the builtin the seed (or plain Python) would raise, so
``except ValueError`` written against the SDK keeps working.
"""

from __future__ import annotations

from tulip_memory.errors import TulipMemoryError

PARQUET_EXTRA = "parquet"


class TurnRecallError(TulipMemoryError):
    """Root of the turn recall errors."""


class InvalidVectorError(TurnRecallError, ValueError):
    """A vector that is not a finite 1-D array of numbers."""


class DimensionMismatchError(InvalidVectorError):
    """A vector whose width differs from the one it is compared or stored with."""

    def __init__(self, what: str, expected: int, actual: int) -> None:
        self.what = what
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"{what} has {actual} dimensions, expected {expected}: every vector of one "
            "store comes from one embedding model (use Memory.reindex to change models)"
        )


class InvalidTurnError(TurnRecallError, ValueError):
    """A turn without the ``turn["content"][0]["text"]`` that ``index_turn`` embeds."""


class TurnNotSerializableError(TurnRecallError, TypeError):
    """An entry's turn or metadata that JSON cannot carry exactly, refused before writing."""

    def __init__(self, index: int, field: str, reason: str) -> None:
        self.index = index
        self.field = field
        self.reason = reason
        super().__init__(f"entry {index}: its {field} cannot be persisted: {reason}")


class StoreFileError(TurnRecallError, ValueError):
    """A file that :func:`~tulip_memory.turns.parquet.load_store` cannot turn into a store."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot load turn store {path!r}: {reason}")


class SchemaVersionError(StoreFileError):
    """A file whose ``_schema_version`` is missing or not the one this code reads."""

    def __init__(self, path: str, found: str | None, supported: int) -> None:
        self.found = found
        self.supported = supported
        if found is None:
            reason = "it has no _schema_version (not written by persist_store?)"
        else:
            reason = f"its _schema_version is {found!r}, this version reads only {supported}"
        super().__init__(path, reason)


class CorruptStoreFileError(StoreFileError):
    """Not Parquet, or Parquet without the columns and values ``persist_store`` writes."""


class ParquetUnavailableError(TurnRecallError, ImportError):
    """pyarrow is not installed, so turn stores cannot be persisted or loaded."""

    def __init__(self) -> None:
        super().__init__(
            "persist_store/load_store need pyarrow: "
            f"pip install 'tulip-memory[{PARQUET_EXTRA}]' (or pip install pyarrow)",
            name="pyarrow",
        )

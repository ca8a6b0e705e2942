"""``persist_store`` / ``load_store``: a ``TurnVectorStore`` as one Parquet file.

Columns, one row per entry in insertion order: ``text`` (string), ``embedding``
(list<double>, exactly the stored floats), ``turn`` and ``metadata`` (JSON text,
since turn dicts differ in shape). ``_schema_version`` (``1``) is in the file's
key-value metadata, so a zero-row file carries it too; any other value, or none,
is refused.

pyarrow is imported on first use; without it both functions raise
:class:`~tulip_memory.turns.errors.ParquetUnavailableError` naming the extra.
"""

from __future__ import annotations

import importlib
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from tulip_memory.turns.errors import (
    CorruptStoreFileError,
    DimensionMismatchError,
    ParquetUnavailableError,
    SchemaVersionError,
    TurnNotSerializableError,
)
from tulip_memory.turns.jsonfield import dump_exact, load_object
from tulip_memory.turns.store import StoreColumns, TurnVectorStore
from tulip_memory.turns.vectors import Matrix

SCHEMA_VERSION = 1
_VERSION_KEY = b"_schema_version"
_COLUMNS = ("text", "embedding", "turn", "metadata")

StorePath = str | os.PathLike[str]


def persist_store(store: TurnVectorStore, path: StorePath) -> None:
    """Write every entry of ``store`` to a Parquet file at ``path``.

    Parent directories are created; an existing file is replaced atomically (a
    failed write leaves it as it was). An empty store gives a valid zero-row file.
    A turn or metadata dict JSON cannot carry exactly raises
    :class:`TurnNotSerializableError` before anything is written.
    """
    pa, pq = _pyarrow()
    table = _to_table(pa, store._columns())
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    _write_replacing(pq, table, target)


def load_store(path: StorePath) -> TurnVectorStore:
    """A new store holding the entries of a file written by :func:`persist_store`, in order.

    Raises ``FileNotFoundError`` when ``path`` does not exist,
    :class:`SchemaVersionError` (a ``ValueError``) when its ``_schema_version`` is not
    1, and :class:`CorruptStoreFileError` (a ``ValueError``) for anything else unreadable.
    """
    pa, pq = _pyarrow()
    shown = os.fspath(path)
    with open(path, "rb") as source:
        try:
            table = pq.read_table(source)
        except pa.ArrowException as e:
            raise CorruptStoreFileError(shown, f"not a readable Parquet file: {e}") from e
    _check_version(table.schema.metadata, shown)
    _check_columns(pa, table, shown)
    return _to_store(table, shown)


def _pyarrow() -> tuple[Any, Any]:
    try:
        return importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError as e:
        raise ParquetUnavailableError() from e


def _schema(pa: Any) -> Any:
    return pa.schema(
        [
            pa.field("text", pa.string(), nullable=False),
            pa.field("embedding", pa.list_(pa.float64()), nullable=False),
            pa.field("turn", pa.string(), nullable=False),
            pa.field("metadata", pa.string(), nullable=False),
        ],
        metadata={_VERSION_KEY: str(SCHEMA_VERSION).encode()},
    )


def _to_table(pa: Any, columns: StoreColumns) -> Any:
    schema = _schema(pa)
    arrays = [
        pa.array(columns.texts, type=pa.string()),
        _embedding_array(pa, columns.vectors),
        pa.array([_json(i, "turn", turn) for i, turn in enumerate(columns.turns)], pa.string()),
        pa.array([_json(i, "metadata", m) for i, m in enumerate(columns.metadata)], pa.string()),
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _embedding_array(pa: Any, vectors: Matrix) -> Any:
    """The rows of ``vectors`` as a list<double> array, built from the matrix without copies."""
    rows, width = vectors.shape
    # A safe int32 cast: past 2**31 values Arrow raises instead of wrapping around.
    offsets = pa.array(np.arange(rows + 1, dtype=np.int64) * width, type=pa.int32())
    return pa.ListArray.from_arrays(offsets, pa.array(vectors.reshape(-1)))


def _json(index: int, field: str, value: dict[str, Any]) -> str:
    try:
        return dump_exact(value)
    except (TypeError, ValueError) as e:
        raise TurnNotSerializableError(index, field, str(e)) from e


def _write_replacing(pq: Any, table: Any, target: Path) -> None:
    """Write beside ``target`` and rename over it, so readers never see half a file."""
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        # Dictionary-encoding random floats only wastes time: strings only.
        pq.write_table(table, os.fspath(temporary), use_dictionary=["text", "turn", "metadata"])
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)


def _check_version(metadata: dict[bytes, bytes] | None, path: str) -> None:
    raw = (metadata or {}).get(_VERSION_KEY)
    if raw is None:
        raise SchemaVersionError(path, None, SCHEMA_VERSION)
    found = raw.decode(errors="replace")
    if found.strip() != str(SCHEMA_VERSION):
        raise SchemaVersionError(path, found, SCHEMA_VERSION)


def _check_columns(pa: Any, table: Any, path: str) -> None:
    for field in _schema(pa):
        if field.name not in table.schema.names:
            raise CorruptStoreFileError(path, f"it has no {field.name!r} column")
        found = table.schema.field(field.name).type
        if not found.equals(field.type):
            raise CorruptStoreFileError(
                path, f"column {field.name!r} is {found}, expected {field.type}"
            )
        if table.column(field.name).null_count:
            raise CorruptStoreFileError(path, f"column {field.name!r} holds nulls")


def _to_store(table: Any, path: str) -> TurnVectorStore:
    texts = table.column("text").to_pylist()
    vectors = _embedding_matrix(table.column("embedding").combine_chunks(), path)
    turns = _objects(table.column("turn").to_pylist(), "turn", path)
    metadata = _objects(table.column("metadata").to_pylist(), "metadata", path)
    return TurnVectorStore._from_columns(StoreColumns(texts, vectors, turns, metadata))


def _embedding_matrix(array: Any, path: str) -> Matrix:
    """A list<double> array of equal-width finite rows as an ``(n, width)`` matrix."""
    widths = array.value_lengths().to_numpy(zero_copy_only=False)
    if widths.size == 0:
        return np.empty((0, 0))
    ragged = np.flatnonzero(widths != widths[0])
    if ragged.size:
        row, width = int(ragged[0]), int(widths[ragged[0]])
        cause = DimensionMismatchError(f"embedding of row {row}", int(widths[0]), width)
        raise CorruptStoreFileError(path, f"row {row}: {cause}") from cause
    if widths[0] == 0:
        raise CorruptStoreFileError(path, "its embeddings are empty")
    values = array.flatten().to_numpy(zero_copy_only=False)
    matrix: Matrix = np.asarray(values, dtype=np.float64).reshape(widths.size, int(widths[0]))
    if not np.isfinite(matrix).all():
        raise CorruptStoreFileError(path, "its embeddings contain NaN, infinite or null values")
    return matrix


def _objects(texts: list[str], field: str, path: str) -> list[dict[str, Any]]:
    objects = []
    for row, text in enumerate(texts):
        try:
            objects.append(load_object(text))
        except ValueError as e:
            message = f"row {row}: its {field} is not a JSON object: {e}"
            raise CorruptStoreFileError(path, message) from e
    return objects

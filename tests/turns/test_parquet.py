"""``persist_store`` / ``load_store``: Parquet round trips, schema version 1, refusals."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.turns.fakes import TableBackend, make_turn
from tulip_memory.turns import (
    SCHEMA_VERSION,
    CorruptStoreFileError,
    DimensionMismatchError,
    Entry,
    Memory,
    SchemaVersionError,
    TurnNotSerializableError,
    TurnVectorStore,
    load_store,
    persist_store,
)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

UNICODE_TEXTS = [
    "plain ascii",
    "café naïve résumé",
    "日本語のテキスト、中文文本",
    "שלום עולם مرحبا",
    "emoji 🐍🚀👩‍👩‍👧 and a zero-width\u200bjoiner",
    "quotes \" ' \\ and control \x00 \t \n chars",
    "",
]


def unicode_store() -> TurnVectorStore:
    rng = np.random.default_rng(11)
    store = TurnVectorStore()
    for i, text in enumerate(UNICODE_TEXTS):
        turn = make_turn(text, timestamp=1_700_000_000.123 + i)
        turn["metadata"] = {"lang": text[:3], "n": i}
        metadata = {
            "user_id": f"ユーザー-{i}",
            "flags": [True, False, None],
            "nested": {"🔑": "値", "ratio": 1 / 3, "big": 2**53 + 1},
        }
        store.add(f"{text}\n{text}", rng.normal(size=24), turn, metadata)
    return store


def write_table(path: Path, columns: dict[str, Any], version: bytes | None = b"1") -> None:
    table = pa.table(columns)
    if version is not None:
        table = table.replace_schema_metadata({b"_schema_version": version})
    pq.write_table(table, path)


def valid_columns() -> dict[str, Any]:
    return {
        "text": pa.array(["a", "b"]),
        "embedding": pa.array([[1.0, 0.0], [0.0, 1.0]], pa.list_(pa.float64())),
        "turn": pa.array(['{"role": "user"}', "{}"]),
        "metadata": pa.array(["{}", '{"k": 1}']),
    }


# round trips


def test_round_trip_keeps_every_entry_exactly_and_in_order(tmp_path: Path) -> None:
    store = unicode_store()
    path = tmp_path / "turns.parquet"
    persist_store(store, str(path))
    loaded = load_store(str(path))
    assert isinstance(loaded, TurnVectorStore) and loaded is not store
    assert list(loaded.iter_entries()) == list(store.iter_entries())
    assert loaded.count() == len(UNICODE_TEXTS)


def test_a_loaded_store_searches_like_the_original(tmp_path: Path) -> None:
    store = unicode_store()
    persist_store(store, tmp_path / "turns.parquet")
    loaded = load_store(tmp_path / "turns.parquet")
    query = np.random.default_rng(5).normal(size=24)
    assert loaded.search(query, top_k=4) == store.search(query, top_k=4)


def test_a_memory_can_swap_in_a_loaded_store(tmp_path: Path) -> None:
    backend = TableBackend({"hi": [1.0, 0.0], "bye": [0.0, 1.0]})
    memory = Memory(backend)
    memory.index_turn(make_turn("hi"), {"session_id": "s1"})
    memory.index_turn(make_turn("bye"))
    persist_store(memory.store, tmp_path / "m.parquet")
    restored = Memory(backend)
    restored.store = load_store(tmp_path / "m.parquet")
    (hit,) = restored.search("bye", top_k=1)
    assert (hit.text, hit.turn_index, hit.turn) == ("bye", 1, make_turn("bye"))


def test_an_empty_store_gives_a_valid_zero_row_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    persist_store(TurnVectorStore(), path)
    table = pq.read_table(path)
    assert table.num_rows == 0
    assert table.schema.names == ["text", "embedding", "turn", "metadata"]
    assert table.schema.metadata[b"_schema_version"] == b"1"
    loaded = load_store(path)
    assert loaded.count() == 0 and loaded.search([1.0]) == []


def test_the_file_layout(tmp_path: Path) -> None:
    store = TurnVectorStore()
    store.add("q\na", [0.25, -1.5], make_turn("a"), {"k": "v"})
    persist_store(store, tmp_path / "t.parquet")
    table = pq.read_table(tmp_path / "t.parquet")
    assert SCHEMA_VERSION == 1
    assert table.schema.metadata[b"_schema_version"] == b"1"
    assert table.column("text").to_pylist() == ["q\na"]
    assert table.column("embedding").to_pylist() == [[0.25, -1.5]]
    assert table.column("embedding").type.value_type == pa.float64()


def test_persist_overwrites_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    persist_store(unicode_store(), path)
    small = TurnVectorStore()
    small.add("only", [1.0], make_turn("only"))
    persist_store(small, path)
    assert list(load_store(path).iter_entries()) == [Entry("only", [1.0], make_turn("only"), {})]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_persist_creates_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "c" / "turns.parquet"
    persist_store(unicode_store(), str(path))
    assert load_store(path).count() == len(UNICODE_TEXTS)


# what persist refuses


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("turn", {"when": datetime.datetime(2024, 1, 1)}),
        ("turn", {"pair": (1, 2)}),
        ("metadata", {1: "int key"}),
        ("metadata", {"score": float("nan")}),
        ("metadata", {"raw": b"bytes"}),
    ],
)
def test_what_json_cannot_carry_is_refused_before_writing(
    tmp_path: Path, field: str, value: dict[Any, Any]
) -> None:
    path = tmp_path / "t.parquet"
    persist_store(unicode_store(), path)
    store = TurnVectorStore()
    store.add("fine", [1.0], make_turn("fine"))
    turn = value if field == "turn" else make_turn("bad")
    store.add("bad", [1.0], turn, value if field == "metadata" else None)
    with pytest.raises(TurnNotSerializableError) as caught:
        persist_store(store, path)
    assert (caught.value.index, caught.value.field) == (1, field)
    assert isinstance(caught.value, TypeError)
    assert load_store(path).count() == len(UNICODE_TEXTS)  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


# what load refuses


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_store(str(tmp_path / "nope.parquet"))


@pytest.mark.parametrize("version", [b"2", b"0", b"one", b""])
def test_another_schema_version_is_refused(tmp_path: Path, version: bytes) -> None:
    path = tmp_path / "t.parquet"
    write_table(path, valid_columns(), version=version)
    with pytest.raises(SchemaVersionError) as caught:
        load_store(path)
    assert isinstance(caught.value, ValueError)
    assert caught.value.found == version.decode()
    assert caught.value.path == str(path)
    assert "_schema_version" in str(caught.value)


def test_a_missing_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    write_table(path, valid_columns(), version=None)
    with pytest.raises(SchemaVersionError, match="no _schema_version") as caught:
        load_store(path)
    assert caught.value.found is None


def test_a_hand_written_version_one_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    write_table(path, valid_columns())
    assert list(load_store(path).iter_entries()) == [
        Entry("a", [1.0, 0.0], {"role": "user"}, {}),
        Entry("b", [0.0, 1.0], {}, {"k": 1}),
    ]


def test_a_file_that_is_not_parquet_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    path.write_text("definitely not parquet")
    with pytest.raises(CorruptStoreFileError, match="not a readable Parquet file"):
        load_store(path)


def corrupt(columns: dict[str, Any], **changes: Any) -> dict[str, Any]:
    columns = {**columns, **changes}
    return {k: v for k, v in columns.items() if v is not None}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"metadata": None}, "no 'metadata' column"),
        ({"text": pa.array([1, 2])}, "column 'text' is int64"),
        ({"embedding": pa.array(["x", "y"])}, "column 'embedding' is string"),
        ({"text": pa.array(["a", None])}, "column 'text' holds nulls"),
        ({"turn": pa.array(["{", "{}"])}, "row 0"),
        ({"turn": pa.array(["[1, 2]", "{}"])}, "expected a JSON object"),
        ({"embedding": pa.array([[1.0, float("nan")], [0.0, 1.0]])}, "NaN"),
    ],
)
def test_a_file_without_the_expected_columns_is_refused(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    path = tmp_path / "t.parquet"
    write_table(path, corrupt(valid_columns(), **changes))
    with pytest.raises(CorruptStoreFileError, match=message):
        load_store(path)


def test_rows_of_different_widths_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    ragged = pa.array([[1.0, 0.0], [0.0, 1.0, 0.0]], pa.list_(pa.float64()))
    write_table(path, corrupt(valid_columns(), embedding=ragged))
    with pytest.raises(CorruptStoreFileError, match="row 1") as caught:
        load_store(path)
    assert isinstance(caught.value.__cause__, DimensionMismatchError)

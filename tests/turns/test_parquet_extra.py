"""Parquet support is optional: pyarrow is imported lazily, and its absence is explained."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tulip_memory.turns import ParquetUnavailableError, TurnVectorStore, load_store, persist_store


@pytest.fixture
def without_pyarrow(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("pyarrow", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, name, None)  # makes `import pyarrow` fail


@pytest.mark.usefixtures("without_pyarrow")
def test_persist_without_pyarrow_names_the_extra(tmp_path: Path) -> None:
    with pytest.raises(ParquetUnavailableError, match=r"tulip-memory\[parquet\]") as caught:
        persist_store(TurnVectorStore(), tmp_path / "t.parquet")
    assert isinstance(caught.value, ImportError)
    assert not (tmp_path / "t.parquet").exists()


@pytest.mark.usefixtures("without_pyarrow")
def test_load_without_pyarrow_names_the_extra(tmp_path: Path) -> None:
    with pytest.raises(ParquetUnavailableError, match=r"pip install"):
        load_store(tmp_path / "t.parquet")


def test_importing_turn_recall_does_not_import_pyarrow() -> None:
    code = "import sys, tulip_memory.turns; sys.exit('pyarrow' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr

"""File storage: no key reaches outside its directory; writes are whole or absent."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tulip_memory.delta import DeltaStorageError, FileDeltaStorage


@pytest.mark.parametrize(
    "key", ["../x", "a/../../x", "/etc/passwd", "a//b", ".", "a/./b", "", "a\\..\\b", "é"]
)
def test_keys_outside_the_directory_are_refused(tmp_path: Path, key: str) -> None:
    storage = FileDeltaStorage(tmp_path / "root", fsync=False)
    with pytest.raises(DeltaStorageError):
        asyncio.run(storage.write_objects({key: b"x"}))
    with pytest.raises(DeltaStorageError):
        asyncio.run(storage.read_objects([key]))
    assert not any(tmp_path.rglob("x"))


def test_temporary_files_are_never_listed_or_left(tmp_path: Path) -> None:
    storage = FileDeltaStorage(tmp_path, fsync=True)
    asyncio.run(storage.write_objects({"heads/ab/t": b"1", "log/ab/t/1/a": b"2"}))
    (tmp_path / "heads" / "ab" / "t~0123").write_bytes(b"partial")
    page = asyncio.run(storage.list_objects(""))
    assert page.keys == ["heads/ab/t", "log/ab/t/1/a"] and not page.truncated
    assert [o.size for o in page.objects] == [1, 1]
    asyncio.run(storage.delete_objects(["log/ab/t/1/a", "log/ab/t/1/missing"]))
    assert not (tmp_path / "log").exists()  # emptied directories are pruned
    assert asyncio.run(storage.list_objects("heads/", start_after="heads/ab/t")).keys == []

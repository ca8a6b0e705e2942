"""Delta storage in a directory: one file per object, written atomically.

Keys map to paths under ``base_dir`` only after a strict check (ASCII segments of
``A-Za-z0-9._-``, never ``.`` or ``..``), so no key can reach outside it. Writes go to
a temporary file (its name holds ``~``, which no key does) that is fsynced and renamed
over the target: readers see a whole object or the previous one. Checkpoints hold conversations:
directories are 0700 and files 0600 (:mod:`tulip_memory.private`). All file work runs
in worker threads, off the event loop.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from tulip_memory.delta.errors import DeltaStorageError
from tulip_memory.delta.storage import DeltaStorage, ObjectInfo, ObjectPage
from tulip_memory.private import FILE_MODE, TMP_MARK, private_dir, write_private

_KEY = re.compile(r"[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*")
_TMP = TMP_MARK


class FileDeltaStorage(DeltaStorage):
    """Delta checkpoints as files under ``base_dir`` (created on first write)."""

    def __init__(self, base_dir: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.base_dir = Path(base_dir).absolute()
        self.fsync = fsync

    def _path(self, key: str) -> Path:
        if not _KEY.fullmatch(key) or any(p in (".", "..") for p in key.split("/")):
            raise DeltaStorageError(key, "not a valid object key for file storage")
        return self.base_dir.joinpath(*key.split("/"))

    async def read_objects(self, keys: Sequence[str]) -> dict[str, bytes | None]:
        return await asyncio.to_thread(self._read_all, list(keys))

    def _read_all(self, keys: list[str]) -> dict[str, bytes | None]:
        return {k: self._read(k) for k in keys}

    def _read(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise DeltaStorageError(key, repr(e)) from e

    async def write_objects(self, objects: Mapping[str, bytes]) -> None:
        await asyncio.to_thread(self._write_all, dict(objects))

    def _write_all(self, objects: dict[str, bytes]) -> None:
        for key, data in objects.items():
            self._write(key, data)

    def _write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            self._dirs(path.parent)
            write_private(path, data, fsync=self.fsync)
        except OSError as e:
            raise DeltaStorageError(key, repr(e)) from e

    def _dirs(self, directory: Path) -> None:
        """``directory`` and every one between it and the base, owner-only (0700)."""
        private_dir(self.base_dir)
        for parent in reversed([directory, *directory.parents]):
            if self.base_dir in parent.parents:
                private_dir(parent)

    async def delete_objects(self, keys: Sequence[str]) -> None:
        await asyncio.to_thread(self._delete_all, list(keys))

    def _delete_all(self, keys: list[str]) -> None:
        for key in keys:
            path = self._path(key)
            try:
                path.unlink(missing_ok=True)
            except OSError as e:
                raise DeltaStorageError(key, repr(e)) from e
            self._prune(path.parent)

    def _prune(self, directory: Path) -> None:
        """Remove directories left empty, up to the base directory."""
        while directory != self.base_dir and self.base_dir in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent

    async def list_objects(
        self, prefix: str, *, start_after: str | None = None, limit: int = 1000
    ) -> ObjectPage:
        return await asyncio.to_thread(self._list, prefix, start_after or "", limit)

    def _list(self, prefix: str, after: str, limit: int) -> ObjectPage:
        top = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        root = self._path(top) if top else self.base_dir
        found: list[ObjectInfo] = []
        for dirpath, _, files in os.walk(root):
            rel = Path(dirpath).relative_to(self.base_dir).as_posix()
            for name in files:
                key = name if rel == "." else f"{rel}/{name}"
                if _TMP not in name and key.startswith(prefix) and key > after:
                    found.append(ObjectInfo(key, (Path(dirpath) / name).stat().st_size))
        found.sort(key=lambda o: o.key)
        return ObjectPage(objects=tuple(found[:limit]), truncated=len(found) > limit)

    async def copy_objects(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        return await asyncio.to_thread(self._copy_all, list(pairs))

    def _copy_all(self, pairs: list[tuple[str, str]]) -> list[str]:
        missing: list[str] = []
        for source, dest in pairs:
            src, dst = self._path(source), self._path(dest)
            tmp = dst.with_name(f"{dst.name}{_TMP}{uuid.uuid4().hex}")
            try:
                self._dirs(dst.parent)
                shutil.copyfile(src, tmp)
                os.chmod(tmp, FILE_MODE)
                os.replace(tmp, dst)
            except FileNotFoundError:
                tmp.unlink(missing_ok=True)
                missing.append(source)
            except OSError as e:
                tmp.unlink(missing_ok=True)
                raise DeltaStorageError(dest, repr(e)) from e
        return missing

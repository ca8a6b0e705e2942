"""Objects as files under a directory, written atomically, readable only by their owner.

Keys map to paths under ``base_dir`` only after a strict check (ASCII segments of
``A-Za-z0-9._-``, never ``.`` or ``..``), so no key can reach outside it. Writes go to
a temporary file (its name holds ``~``, which no key does) that is fsynced and renamed
over the target: readers see a whole object or the previous one. Objects hold
conversations: directories are 0700 and files 0600 (:mod:`tulip_memory.private`).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

from tulip_memory.objects.base import ObjectInfo, ObjectPage, ObjectStoreError
from tulip_memory.private import FILE_MODE, TMP_MARK, private_dir, write_private

_KEY = re.compile(r"[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*")


class FileObjectStore:
    """Objects as files under ``base_dir`` (created on first write); ``fsync=False``
    trades durability on power loss for speed (tests)."""

    blocking = True

    def __init__(self, base_dir: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.base_dir = Path(base_dir).absolute()
        self.fsync = fsync

    def _error(self, key: str, e: OSError | str) -> ObjectStoreError:
        return ObjectStoreError(key, e if isinstance(e, str) else repr(e), str(self.base_dir))

    def _path(self, key: str) -> Path:
        if not _KEY.fullmatch(key) or any(p in (".", "..") for p in key.split("/")):
            raise self._error(key, "not a valid object key for file storage")
        return self.base_dir.joinpath(*key.split("/"))

    def get(self, key: str, limit: int | None = None) -> bytes | None:
        try:
            with self._path(key).open("rb") as f:
                return f.read(-1 if limit is None else limit)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None  # a key whose path is a directory names no object either
        except OSError as e:
            raise self._error(key, e) from e

    def put(self, key: str, data: bytes, *, if_match: str | None = None) -> str | None:
        path = self._path(key)
        try:
            self._dirs(path.parent)
            write_private(path, data, fsync=self.fsync)
        except OSError as e:
            raise self._error(key, e) from e
        return None

    def _dirs(self, directory: Path) -> None:
        """``directory`` and every one between it and the base, owner-only (0700)."""
        private_dir(self.base_dir)
        for parent in reversed([directory, *directory.parents]):
            if self.base_dir in parent.parents:
                private_dir(parent)

    def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            path = self._path(key)
            try:
                path.unlink(missing_ok=True)
            except OSError as e:
                raise self._error(key, e) from e
            self._prune(path.parent)

    def _prune(self, directory: Path) -> None:
        """Remove directories left empty, up to the base directory."""
        while directory != self.base_dir and self.base_dir in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent

    def list(self, prefix: str, *, start_after: str | None = None, limit: int = 1000) -> ObjectPage:
        top = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        root = self._path(top) if top else self.base_dir
        after = start_after or ""
        found: list[ObjectInfo] = []
        for dirpath, _, files in os.walk(root):
            rel = Path(dirpath).relative_to(self.base_dir).as_posix()
            for name in files:
                key = name if rel == "." else f"{rel}/{name}"
                if TMP_MARK not in name and key.startswith(prefix) and key > after:
                    found.append(ObjectInfo(key, (Path(dirpath) / name).stat().st_size))
        found.sort(key=lambda o: o.key)
        return ObjectPage(objects=tuple(found[:limit]), truncated=len(found) > limit)

    def copy(self, source: str, dest: str) -> bool:
        src, dst = self._path(source), self._path(dest)
        tmp = dst.with_name(f"{dst.name}{TMP_MARK}{uuid.uuid4().hex}")
        try:
            self._dirs(dst.parent)
            shutil.copyfile(src, tmp)
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, dst)
        except FileNotFoundError:
            tmp.unlink(missing_ok=True)
            return False
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise self._error(dest, e) from e
        return True

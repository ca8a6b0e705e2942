"""Files that hold conversations or secrets: directories 0700, files 0600, whatever the umask.

Every local file of the project that holds a user's messages (spool, claim checks,
file checkpoints) or a secret (``tulip.env``) is created through these helpers, so no
other local user can read it. Modes are set at creation (``os.open`` with the mode, then
``chmod``, because the umask can only narrow a mode and a directory that already
existed keeps its old one), never widened afterwards.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600
#: In the name of every temporary file, and in no key or final file name.
TMP_MARK = "~"


def private_dir(path: str | os.PathLike[str]) -> Path:
    """``path`` as a directory only its owner can enter (created with its parents)."""
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    if directory.stat().st_mode & 0o777 != DIR_MODE:
        directory.chmod(DIR_MODE)
    return directory


def private_file(path: str | os.PathLike[str]) -> Path:
    """``path`` as a file only its owner can read (created empty if missing)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return Path(path)


def write_private(path: str | os.PathLike[str], data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (readers see the old file or the new
    one, whole), as a 0600 file. The temporary file's name holds :data:`TMP_MARK`
    (listings skip such names); it is removed on failure."""
    target = Path(path)
    tmp = target.with_name(f"{target.name}{TMP_MARK}{uuid.uuid4().hex}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), FILE_MODE)
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

"""Write files so a crash leaves either the old content or the new, never half.

Every writer in the project goes through here: temp file in the same
directory, fsync, rename over the target, fsync the directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def fsync_dir(directory: Path) -> None:
    """Make a rename durable: the directory entry itself must reach the disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_filesystem(path: Path) -> None:
    """Flush everything written on ``path``'s filesystem to the disk (``syncfs(2)``).

    Why: a tree that other programs wrote (restic, Litestream) is not fsynced file by file.
    Before it is renamed into place its content must be on the disk, or a crash right after
    the rename leaves durable names over data that never got there. One call covers every
    file of the tree, where an fsync per file would cost a disk flush each.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(libc, "syncfs"):  # not Linux: every filesystem, not just this one
            os.sync()
        elif libc.syncfs(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(path))
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: Path, mode: int = 0o644, binary: bool = False) -> Iterator[IO]:
    """Yield a file object; on clean exit it replaces ``path`` atomically.

    On an exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> None:
    with atomic_writer(path, mode=mode) as fh:
        fh.write(text)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    with atomic_writer(path, mode=mode, binary=True) as fh:
        fh.write(data)

"""How the roles of a pod share files: through the pod's group, never through the owner.

Each role (agent, replicate, backup, restore, Vault) runs as a UID of its own, all with the
pod's ``fsGroup`` as a supplemental group, and none may ``chown`` (Pod Security
"restricted"). So a file one role writes and another reads or writes must carry the group's
bits: a process that hands files on creates them under :data:`SHARED_UMASK`, and
:func:`share_tree` widens what already exists (a volume from before, what restic restored
with the snapshot's modes). This module is the one place that rule lives.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Group-writable, as the roles need; "other" keeps read: only the pod's roles mount these
# volumes, and every one of them is in the group already.
SHARED_UMASK = 0o002
SHARED_FILE_MODE = 0o666 & ~SHARED_UMASK  # for writers that set a file's mode themselves
FILE_BITS = stat.S_IRGRP | stat.S_IWGRP
FOLDER_BITS = stat.S_IRWXG


@contextlib.contextmanager
def shared_umask() -> Iterator[None]:
    """Run under :data:`SHARED_UMASK` (children started meanwhile inherit it); restore after.

    Also a decorator (``@shared_umask()``). The umask is the process's, not the thread's:
    meant for a command's whole run, not for one call inside a server.
    """
    previous = os.umask(SHARED_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


@dataclass
class Shared:
    """What :func:`share_tree` did: entries it widened, and entries another UID owns."""

    widened: int = 0
    not_owned: int = 0


def _no_skip(relpath: str, is_dir: bool) -> bool:
    return False


FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A folder that cannot be entered as one: a link (ELOOP, ENOTDIR), gone, or not searchable.
_NOT_ENTERED = (errno.ELOOP, errno.ENOTDIR, errno.ENOENT, errno.EACCES)


def share_tree(root: Path, skip: Callable[[str, bool], bool] = _no_skip) -> Shared:
    """Add the group's read and write to the regular files, and read, write and search to the
    folders, that this process's UID owns in ``root`` (``root`` included).

    Rules: below ``root`` a link is never followed nor changed (every name is opened beneath
    its folder's descriptor with ``O_NOFOLLOW``, and the change is made to that very inode);
    an entry another UID owns is left alone (changing it would fail with EPERM); sockets,
    FIFOs and devices are left alone; ``skip(relpath, is_dir)`` true leaves an entry, and a
    folder's whole content, as it is; an entry gone meanwhile is no error. One descriptor
    per level of depth is open at a time.
    """
    shared = Shared()
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the caller's folder
    stack = [_enter(top, "", skip, shared)]
    try:
        while stack:
            fd, prefix, subfolders = stack[-1]
            name = next(subfolders, None)
            if name is None:
                os.close(stack.pop()[0])
                continue
            child = _open_folder(name, fd)
            if child is not None:
                stack.append(_enter(child, f"{prefix}{name}/", skip, shared))
    finally:
        for fd, _, _ in stack:
            os.close(fd)
    return shared


def _open_folder(name: str, dir_fd: int) -> int | None:
    try:
        return os.open(name, FOLDER_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _NOT_ENTERED:
            return None
        raise


def _enter(
    fd: int, prefix: str, skip: Callable[[str, bool], bool], shared: Shared
) -> tuple[int, str, Iterator[str]]:
    """Widen the folder ``fd`` and its files; return it with the subfolders still to visit
    (``fd`` is closed here if this fails)."""
    subfolders: list[str] = []
    try:
        _widen(fd, stat.S_ISDIR, FOLDER_BITS, shared)
        with os.scandir(fd) as entries:
            for entry in entries:
                relpath = prefix + entry.name
                if entry.is_dir(follow_symlinks=False):
                    if not skip(relpath, True):
                        subfolders.append(entry.name)
                elif entry.is_file(follow_symlinks=False) and not skip(relpath, False):
                    _widen_file(entry.name, fd, shared)
    except BaseException:
        os.close(fd)
        raise
    return fd, prefix, iter(subfolders)


def _widen_file(name: str, dir_fd: int, shared: Shared) -> None:
    """The entry itself, never what a link points to: ``O_PATH | O_NOFOLLOW`` opens no device
    or FIFO and follows nothing; ``fchmod`` refuses such a descriptor, so the change goes
    through its ``/proc/self/fd`` entry, which names that inode and no other path."""
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    try:
        _widen(fd, stat.S_ISREG, FILE_BITS, shared, via_proc=True)
    finally:
        os.close(fd)


def _widen(
    fd: int, kind: Callable[[int], bool], bits: int, shared: Shared, via_proc: bool = False
) -> None:
    """Add ``bits`` to the inode ``fd`` holds, if it is ours and of the ``kind`` expected."""
    st = os.fstat(fd)
    if not kind(st.st_mode):
        return
    if st.st_uid != os.geteuid():
        shared.not_owned += 1
        return
    mode = stat.S_IMODE(st.st_mode)
    if mode | bits == mode:
        return
    if via_proc:
        os.chmod(f"/proc/self/fd/{fd}", mode | bits)
    else:
        os.fchmod(fd, mode | bits)
    shared.widened += 1


def create_shared(path: str | os.PathLike[str]) -> None:
    """Create ``path`` empty and group-writable (:data:`SHARED_FILE_MODE`, whatever the
    umask) when nothing is there; leave whatever is.

    SQLite creates a new database 0644 whatever the umask, and its ``-wal`` and ``-shm`` copy
    that mode; ``replicate`` writes the agent's databases through the group. A file created
    here first is one SQLite opens instead of creating it: an empty file is an empty database.
    The mode is set on the descriptor, not left to the umask: a process started in the agent
    container by ``kubectl exec`` has the runtime's default umask, not the agent's. No link
    is followed, and nothing happens when the folder is missing (SQLite then reports what it
    finds).
    """
    if os.fspath(path) in ("", ":memory:"):  # SQLite's names for no file
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, SHARED_FILE_MODE)
    except OSError:
        return
    try:
        os.fchmod(fd, SHARED_FILE_MODE)
    finally:
        os.close(fd)


def share_new_sqlite3_databases() -> None:
    """Every later ``sqlite3.connect`` of this process creates a new database group-writable.

    For the gateway process: Hermes and its plugins open their databases with ``sqlite3``
    by path. ``:memory:``, ``file:`` URIs and descriptors are passed on untouched. Installed
    once: a second call does nothing.
    """
    import sqlite3

    original = sqlite3.connect
    if getattr(original, "_creates_shared", False):
        return

    def connect(database: Any, *args: Any, **kwargs: Any) -> Any:
        name = os.fspath(database) if isinstance(database, (str, os.PathLike)) else None
        if isinstance(name, str) and not kwargs.get("uri"):
            create_shared(name)
        return original(database, *args, **kwargs)

    connect._creates_shared = True  # type: ignore[attr-defined]
    sqlite3.connect = connect

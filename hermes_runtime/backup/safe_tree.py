"""The data dir read as hostile input: every name opened beneath a held folder, no link followed.

Why: the agent writes its data dir and may plant or swap anything there between a backup's
scan and its copy (a link to a folder outside, to ``/proc/self``), while the process reading
it holds the repository password and the bucket keys. So every file is opened relative to a
directory descriptor with no link followed at any component: ``openat2`` with
``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` where the kernel has it, else
one ``O_NOFOLLOW | O_DIRECTORY`` step a component (``open_beneath``). A file is read only once
``fstat`` of the open descriptor shows a regular file; it is opened non-blocking, so a FIFO
swapped in never holds the backup up. Links are reported as their target text
(``readlink`` in their folder), never read through; sockets, FIFOs and devices the scan meets
are never opened. Nothing reaches ``/proc`` or ``/sys``: only a link could lead there.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hermes_runtime.backup.untrusted import name_problem

HEAD_BYTES = 16  # what the scan reads of each file: enough for SQLite's header
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# Errors that mean "a link, a socket or a non-folder on the way": the name is refused.
REFUSED_ERRNOS = {
    errno.ELOOP: "a link",
    errno.EXDEV: "a link",
    errno.ENOTDIR: "a link or a non-folder",  # O_DIRECTORY | O_NOFOLLOW meeting a link
    errno.ENXIO: "a socket",
}

SYS_OPENAT2 = 437  # the same number on every architecture (added after the tables merged)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
COPY_CHUNK = 1 << 30

Kind = Literal["dir", "file", "link", "special", "refused", "unreadable"]


class Refused(Exception):
    """A name of the tree that is not read: a link, a socket or a FIFO where a file was."""

    def __init__(self, relpath: str, reason: str) -> None:
        super().__init__(f"{relpath}: {reason}")
        self.relpath = relpath
        self.reason = reason


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long


def _openat2(dir_fd: int, relpath: str, flags: int) -> int:
    how = _OpenHow(flags, 0, RESOLVE)
    while True:
        fd = _LIBC.syscall(
            ctypes.c_long(SYS_OPENAT2),
            ctypes.c_long(dir_fd),
            ctypes.c_char_p(os.fsencode(relpath)),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code not in (errno.EAGAIN, errno.EINTR):  # EAGAIN: a rename raced the lookup
            raise OSError(code, os.strerror(code), relpath)


def _kernel_resolves() -> bool:
    """Whether this kernel (and the container's seccomp profile) lets us call ``openat2``."""
    try:
        os.close(_openat2(-100, "/", DIR_FLAGS))  # AT_FDCWD; "/" is beneath nothing: EXDEV
    except OSError as exc:
        return exc.errno == errno.EXDEV
    return True


OPENAT2 = _kernel_resolves()


def open_root(path: Path) -> int:
    """A descriptor of the data dir itself (no link as its last component)."""
    return os.open(path, DIR_FLAGS)


def open_beneath(root_fd: int, relpath: str, flags: int) -> int:
    """``relpath`` opened beneath ``root_fd``, no link followed at any component.

    ``Refused`` for a link, a socket or a non-folder on the way; ``FileNotFoundError`` when
    the name is gone.
    """
    problem = name_problem(relpath)
    if problem is not None:
        raise ValueError(f"{relpath!r} is not a relative path of plain parts: it {problem}")
    try:
        if OPENAT2:
            return _openat2(root_fd, relpath, flags | os.O_NOFOLLOW)
        return _open_step_by_step(root_fd, relpath.split("/"), flags)
    except OSError as exc:
        if exc.errno in REFUSED_ERRNOS:
            raise Refused(relpath, f"{REFUSED_ERRNOS[exc.errno]} on the way") from exc
        raise


def _open_step_by_step(root_fd: int, parts: list[str], flags: int) -> int:
    """Without ``openat2``: one ``O_NOFOLLOW`` open per component, each beneath the last."""
    current = root_fd
    try:
        for part in parts[:-1]:
            step = os.open(part, DIR_FLAGS, dir_fd=current)
            if current != root_fd:
                os.close(current)
            current = step
        return os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=current)
    finally:
        if current != root_fd:
            os.close(current)


@dataclass(frozen=True)
class Entry:
    """One name of the tree as the walk met it; ``stat`` is of the open descriptor."""

    relpath: str
    kind: Kind
    stat: os.stat_result | None = None
    target: str = ""  # a link's text
    head: bytes = b""  # a file's first HEAD_BYTES
    reason: str = ""  # why a "special", "refused" or "unreadable" entry is not read


def walk(root_fd: int, skip: Callable[[str, bool], bool]) -> Iterator[Entry]:
    """Every name beneath ``root_fd``, sorted per folder, folders before their content.

    ``skip(relpath, is_dir)`` leaves a name out (and a folder's content with it) before it
    is opened. A name gone since its folder was listed is left out.
    """
    yield from _walk(root_fd, "", skip)


def _walk(dir_fd: int, prefix: str, skip: Callable[[str, bool], bool]) -> Iterator[Entry]:
    with os.scandir(dir_fd) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries:
        relpath = f"{prefix}/{entry.name}" if prefix else entry.name
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            if skip(relpath, is_dir):
                continue
            if is_dir:
                yield from _walk_into(dir_fd, entry.name, relpath, skip)
            elif entry.is_symlink():
                yield _link_entry(dir_fd, entry.name, relpath)
            elif entry.is_file(follow_symlinks=False):
                yield _file_entry(dir_fd, entry.name, relpath)
            else:
                yield Entry(relpath, "special", reason="a socket, FIFO or device")
        except FileNotFoundError:
            continue


def _walk_into(
    dir_fd: int, name: str, relpath: str, skip: Callable[[str, bool], bool]
) -> Iterator[Entry]:
    try:
        fd = _open_in(dir_fd, name, DIR_FLAGS)
    except PermissionError:
        yield _unreadable(relpath)
        return
    if isinstance(fd, str):
        yield Entry(relpath, "refused", reason=f"a folder replaced by {fd}")
        return
    try:
        yield Entry(relpath, "dir", os.fstat(fd))
        yield from _walk(fd, relpath, skip)
    finally:
        os.close(fd)


def _open_in(dir_fd: int, name: str, flags: int) -> int | str:
    """A descriptor of ``name`` in the folder ``dir_fd``, or what it is when refused."""
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in REFUSED_ERRNOS:
            raise
        return REFUSED_ERRNOS[exc.errno]


def _link_entry(dir_fd: int, name: str, relpath: str) -> Entry:
    try:
        return Entry(relpath, "link", target=os.readlink(name, dir_fd=dir_fd))
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        return Entry(relpath, "refused", reason="a link replaced while listed")


def _unreadable(relpath: str) -> Entry:
    """A name this process may not read: its owner made it private (another role's UID)."""
    return Entry(relpath, "unreadable", reason=f"not readable by UID {os.geteuid()}")


def _file_entry(dir_fd: int, name: str, relpath: str) -> Entry:
    try:
        fd = _open_in(dir_fd, name, FILE_FLAGS)
    except PermissionError:
        return _unreadable(relpath)
    if isinstance(fd, str):
        return Entry(relpath, "refused", reason=f"a file replaced by {fd}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Entry(relpath, "refused", reason="a file replaced by a FIFO or device")
        return Entry(relpath, "file", st, head=os.read(fd, HEAD_BYTES))
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Copied:
    """``fstat`` of the source before and after its bytes were copied."""

    before: os.stat_result
    after: os.stat_result

    @property
    def changed(self) -> bool:
        """Written while copied: the copy may hold old and new bytes."""
        return (self.before.st_size, self.before.st_mtime_ns) != (
            self.after.st_size,
            self.after.st_mtime_ns,
        )


def copy_file(root_fd: int, relpath: str, dest_fd: int) -> Copied:
    """Copy the regular file ``relpath`` (beneath ``root_fd``) into ``dest_fd``.

    ``Refused`` unless it is reached without a link and ``fstat`` shows a regular file
    before a byte is read.
    """
    src = open_beneath(root_fd, relpath, FILE_FLAGS)
    try:
        before = os.fstat(src)
        if not stat.S_ISREG(before.st_mode):
            raise Refused(relpath, "no longer a regular file (a FIFO or device)")
        _copy_bytes(src, dest_fd)
        return Copied(before, os.fstat(src))
    finally:
        os.close(src)


def _copy_bytes(src: int, dest: int) -> None:
    """All of ``src`` into ``dest`` in the kernel (``sendfile``), as ``shutil`` copies."""
    offset = 0
    while True:
        try:
            sent = os.sendfile(dest, src, offset, COPY_CHUNK)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOSYS) or offset:
                raise
            _copy_by_reads(src, dest)
            return
        if sent == 0:
            return
        offset += sent


def _copy_by_reads(src: int, dest: int) -> None:
    while chunk := os.read(src, 1 << 20):
        view = memoryview(chunk)
        while view:
            view = view[os.write(dest, view) :]

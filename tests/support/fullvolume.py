"""A real full volume for tests: a size-limited tmpfs, filled to its last byte by a ballast.

Why a tmpfs and not a mock: what a full volume does to SQLite (``SQLITE_FULL`` only when the
WAL or the database must grow; an in-place rewrite still succeeds), to an atomic file write
(``ENOSPC`` at the write, the temp file removed) and to ``statvfs`` is the behaviour under
test (issue 30). Mounting needs root (CAP_SYS_ADMIN); the CI machine and the dev VM run tests
as root. Without it the test fails, saying so (a skip would count as passing in CI).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

BALLAST = "ballast.bin"


@contextlib.contextmanager
def small_tmpfs(mountpoint: Path, mib: int = 4) -> Iterator[Path]:
    """A tmpfs of ``mib`` MiB mounted at ``mountpoint`` (created), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.fail("a full-volume test mounts a size-limited tmpfs: run the tests as root")
    mountpoint.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={mib}m,mode=0755", "tmpfs", str(mountpoint)],
        check=True,
        capture_output=True,
    )
    try:
        yield mountpoint
    finally:
        done = subprocess.run(["umount", str(mountpoint)], capture_output=True, check=False)
        if done.returncode != 0:  # a file still open (a daemon thread): detach it anyway
            subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, check=False)


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def fill(volume: Path) -> Path:
    """Write a ballast until the volume refuses a byte (ENOSPC); its path."""
    ballast = volume / BALLAST
    with ballast.open("ab", buffering=0) as handle:  # unbuffered: each write reaches tmpfs
        for size in (65536, 512, 1):  # a partial write comes back short, then ENOSPC
            try:
                while True:
                    handle.write(b"\xa5" * size)
            except OSError as exc:
                assert exc.errno == 28, exc  # ENOSPC, nothing else
    assert free_bytes(volume) == 0, free_bytes(volume)
    return ballast


def refuses_a_new_file(volume: Path) -> bool:
    """Whether a new 8 KiB file is refused: the volume is full for real."""
    probe = volume / "probe.new"
    try:
        probe.write_bytes(b"x" * 8192)
    except OSError as exc:
        probe.unlink(missing_ok=True)
        return exc.errno == 28
    probe.unlink()
    return False


def remount(volume: Path, mode: str) -> None:
    """Remount the tmpfs at ``volume`` read-only (``ro``) or writable again (``rw``): every
    file on it must be closed for ``ro``."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(volume)], check=True, capture_output=True)

"""The live database a snapshot reads: a file of a folder this process holds open, not a path.

Why: SQLite opens a database, its ``-wal`` and its ``-shm`` by path, and first makes the path
absolute by reading each link on it as text; a read-only connection even creates a missing
``-wal`` or ``-shm``. Between the scan and the snapshot the agent can replace any folder of
the data dir by a link to a folder outside (a database the backup pod can read, or a place
for SQLite to create files in), and no check of a path made before SQLite's own open holds
at SQLite's open.

What guards what:

- The database's folder is opened beneath the data dir with no link followed
  (``safe_tree.open_beneath``) and held open (``HeldDatabase.dir_fd``): the ancestors.
- SQLite is given ``/proc/self/fd/<dir_fd>/<name>`` and a VFS (``held-dir``) that keeps that
  name as it is instead of resolving it: the kernel resolves the folder through our
  descriptor whatever happens to the tree's paths, and SQLite derives the ``-wal`` and
  ``-shm`` names from it, so all three files are opened in the checked folder. SQLite opens
  each last component with ``O_NOFOLLOW`` itself: a link there is refused.
- ``identity`` (before the copy) requires a regular file at the name: a FIFO or socket found
  there is never opened. ``require_same`` (after it) requires that same file still there; a
  file renamed over the database meanwhile fails the attempt (it is retried).
- The connection never checkpoints on close (``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE``): a backup
  does not write the agent's database.
- On a read-only mount (the chart's backup pods) SQLite reads a WAL database only through an
  existing ``-shm``, that is while its owner has it open. A database no process has open (no
  ``-shm``, no WAL content) is read as it lies (``immutable``), and the copy counts only if
  the file's size and mtime and its rest are the same after it (``rest_state``). A ``-wal``
  with content and no ``-shm`` (its owner crashed) cannot be read there without recovery,
  which writes: refused, naming the file.

What is left: a file the agent renames over the name in the instant between ``identity`` and
SQLite's open is read instead; it is a file of the same folder, inside the data dir (a FIFO
there makes that attempt wait for a writer). A hard link can only name a file of the data
dir's own filesystem.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import apsw

from hermes_runtime.backup.safe_tree import Refused
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.sqlite import STATEMENT_CACHE_SIZE, require_safe_sqlite

VFS_NAME = "hermes-held-dir"
HELD_PREFIX = "/proc/self/fd/"


class DatabaseReplaced(Exception):
    """Another file took the database's name while its snapshot was taken."""


@dataclass(frozen=True)
class RestState:
    """A database no process has open, on a read-only mount: what must hold after its copy."""

    size: int
    mtime_ns: int


class _HeldDirVFS(apsw.VFS):
    """The default VFS, except that a name through a held folder is used as given."""

    def __init__(self) -> None:
        super().__init__(VFS_NAME, base="")

    def xFullPathname(self, name: str) -> str:
        if name.startswith(HELD_PREFIX):
            return name
        return str(super().xFullPathname(name))


_VFS: list[_HeldDirVFS] = []  # registered once, on first use, and kept alive


def _held_dir_vfs() -> str:
    if not _VFS:
        _VFS.append(_HeldDirVFS())
    return VFS_NAME


@dataclass(frozen=True)
class HeldDatabase:
    """A database by its name inside a folder this process holds (``dir_fd``, not closed here).

    ``label`` is its path in the data dir, for messages.
    """

    dir_fd: int
    name: str
    label: str

    def __str__(self) -> str:
        return self.label

    def identity(self) -> tuple[int, int]:
        """Device and inode of the regular file at the name; ``Refused`` for anything else."""
        st = os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(self.label, "no longer a regular file")
        return st.st_dev, st.st_ino

    def require_same(self, identity: tuple[int, int]) -> None:
        """``DatabaseReplaced`` unless the name still holds the file ``identity`` named."""
        try:
            now = self.identity()
        except (OSError, Refused) as exc:
            raise DatabaseReplaced(f"{self.label} changed while copied: {exc}") from exc
        if now != identity:
            raise DatabaseReplaced(f"{self.label} was replaced by another file while copied")

    def rest_state(self) -> RestState | None:
        """On a read-only mount with no ``-shm``: the file's state, to read it as it lies.

        None where SQLite can read it the usual way (a writable mount, or an owner holding it
        open). A ``-wal`` with content and no ``-shm`` on a read-only mount fails the backup
        (``RuntimeFailure``): leaving the database out would pass for a complete backup.
        """
        if not os.fstatvfs(self.dir_fd).f_flag & os.ST_RDONLY or self._size("-shm") is not None:
            return None
        if self._size("-wal"):
            raise RuntimeFailure(
                f"database {self.label}: its -wal holds transactions and no process has it "
                "open (its owner stopped "
                "without a checkpoint); a backup cannot recover it from a read-only volume: "
                "it is recovered when its owner opens it again (or mount the data volume "
                "read-write for the backup: backup.dataVolumeReadOnly=false)",
            )
        st = os.stat(self.name, dir_fd=self.dir_fd, follow_symlinks=False)
        return RestState(st.st_size, st.st_mtime_ns)

    def require_rest(self, state: RestState) -> None:
        """``DatabaseReplaced`` unless the file was left as it lay while it was read."""
        if self.rest_state() != state:
            raise DatabaseReplaced(f"{self.label} was written while copied")

    def _size(self, suffix: str) -> int | None:
        try:
            st = os.stat(self.name + suffix, dir_fd=self.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        return st.st_size

    def connect(self, busy_timeout_ms: int, *, at_rest: bool = False) -> apsw.Connection:
        """A read-only connection to the file at the name, opened through the held folder.

        ``at_rest``: read the file as it lies (``immutable``: no lock, no ``-shm``), for a
        database no process has open on a read-only mount (``rest_state``).
        """
        require_safe_sqlite()
        name = f"{HELD_PREFIX}{self.dir_fd}/{self.name}"
        flags = apsw.SQLITE_OPEN_READONLY
        if at_rest:
            name, flags = f"file:{name}?immutable=1", flags | apsw.SQLITE_OPEN_URI
        conn = apsw.Connection(
            name,
            flags=flags,
            vfs=_held_dir_vfs(),
            statementcachesize=STATEMENT_CACHE_SIZE,
        )
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        conn.set_busy_timeout(busy_timeout_ms)
        return conn

"""Which files of the data dir a backup takes, and how it classifies them.

SQLite databases are found by their 16-byte header, not their name, because
Hermes and its plugins create databases under many names. Everything that
can be rebuilt (Git checkouts, caches) or must never leave the pod (secrets)
is excluded by default; see docs/backup.md for the list and the reasons. The tree is
the agent's, walked as hostile input (``safe_tree``): no link followed, each header read
from a descriptor shown to be a regular file.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hermes_runtime.backup.manifest import MANIFEST_DIR
from hermes_runtime.backup.safe_tree import Entry, open_root, walk
from hermes_runtime.common.logs import log_event

SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")
STAGING_PREFIX = ".hermes-restore-"
RESERVED = (MANIFEST_DIR,)  # names at the data dir's root that the backup writes itself

# Patterns follow .gitignore habits: a pattern without "/" matches a name at
# any depth; a pattern with "/" matches the path from the data dir's root;
# a trailing "/" matches directories only (and everything below them).
DEFAULT_EXCLUDES: tuple[str, ...] = (
    # rebuilt by git-sync from Git, the source of truth for plugins
    ".git-sync/",
    # filesystem and our own restore scratch space
    "lost+found/",
    f"{STAGING_PREFIX}*/",
    # caches: rebuilt on demand
    "cache/",
    ".cache/",
    "__pycache__/",
    "*.pyc",
    "node_modules/",
    # runtime state that is wrong after a restore
    "gateway.pid",
    ".hermes-runtime/backup-status.json",
    ".hermes-runtime/litestream/",  # Litestream's local state (continuous.py)
    # the gateway's Idempotency-Key answers (agent/idempotency.py): minutes of TTL, and after a
    # restore an answer could name a turn the restored state.db does not hold
    ".hermes-runtime/idempotency.db*",
    "auth.lock",
    # secrets (Hermes' own list of credential stores, agent/file_safety.py)
    ".env",
    "auth.json",
    ".anthropic_oauth.json",
    "webhook_subscriptions.json",
    "auth/google_oauth.json",
    "mcp-tokens/",
    "whatsapp/session/",
    "secrets/",
    "*.pem",
    "*.key",
)


@dataclass(frozen=True)
class Excluder:
    """Decides whether a path (relative to the data dir) stays out of the backup."""

    patterns: tuple[str, ...]

    def excluded(self, relpath: str, is_dir: bool) -> bool:
        parts = relpath.split("/")
        for raw in self.patterns:
            if raw.endswith("/**"):  # "dir/**" means the folder and all below it
                raw = raw[:-2]
            dir_only = raw.endswith("/")
            pattern = raw.rstrip("/").removeprefix("**/")
            if dir_only and not is_dir:
                continue
            if "/" in pattern:
                if fnmatch.fnmatchcase(relpath, pattern):
                    return True
            elif fnmatch.fnmatchcase(parts[-1], pattern):
                return True
        return False


def make_excluder(extra: Iterable[str] = (), defaults: bool = True) -> Excluder:
    base = DEFAULT_EXCLUDES if defaults else ()
    return Excluder(tuple(base) + tuple(extra))


@dataclass(frozen=True)
class FoundFile:
    relpath: str
    size: int
    mode: int
    mtime_ns: int
    inode: int
    device: int = 0


@dataclass(frozen=True)
class FoundLink:
    relpath: str
    target: str


@dataclass(frozen=True)
class FoundDir:
    relpath: str
    mode: int


@dataclass
class Selection:
    """What a scan of the data dir found, already split by kind.

    ``root`` is the device and inode of the data dir scanned: the copy reads the same one.
    """

    databases: list[FoundFile] = field(default_factory=list)
    files: list[FoundFile] = field(default_factory=list)
    links: list[FoundLink] = field(default_factory=list)
    dirs: list[FoundDir] = field(default_factory=list)
    skipped_special: list[str] = field(default_factory=list)
    root: tuple[int, int] = (0, 0)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.databases) + sum(f.size for f in self.files)


def scan_data_dir(data_dir: Path, excluder: Excluder) -> Selection:
    """Walk ``data_dir`` as hostile input (``safe_tree``) and classify every entry.

    Names the backup writes itself (``RESERVED``) are never taken from the tree: one planted
    there is left out with a logged line naming it, whatever the excludes say.
    """
    root_fd = open_root(data_dir)
    try:
        root = os.fstat(root_fd)
        selection = Selection(root=(root.st_dev, root.st_ino))
        heads: dict[str, bytes] = {}
        for entry in walk(root_fd, lambda relpath, is_dir: _left_out(relpath, is_dir, excluder)):
            _classify(selection, entry, heads)
    finally:
        os.close(root_fd)
    return selection


def _left_out(relpath: str, is_dir: bool, excluder: Excluder) -> bool:
    """Reserved and excluded names; and the ``-wal``, ``-shm``, ``-journal`` of an excluded file."""
    if relpath in RESERVED:
        log_event("backup.scan.ignored", path=relpath, reason="a name the backup writes itself")
        return True
    if excluder.excluded(relpath, is_dir):
        return True
    return not is_dir and any(excluder.excluded(main, False) for main in _mains(relpath) if main)


def _mains(relpath: str) -> list[str]:
    """The database ``relpath`` would be the ``-wal``, ``-shm`` or ``-journal`` of."""
    return [relpath.removesuffix(s) for s in SQLITE_SIDE_SUFFIXES if relpath.endswith(s)]


def _classify(selection: Selection, entry: Entry, heads: dict[str, bytes]) -> None:
    """File ``entry`` under its kind; ``heads``: the first bytes of every file met so far.

    The walk sorts each folder, so a database comes before its ``-wal``, ``-shm``, ``-journal``.
    """
    st = entry.stat
    if entry.kind == "link":
        selection.links.append(FoundLink(entry.relpath, entry.target))
    elif entry.kind == "dir" and st is not None:
        selection.dirs.append(FoundDir(entry.relpath, stat.S_IMODE(st.st_mode)))
    elif entry.kind == "file" and st is not None:
        heads[entry.relpath] = entry.head
        if _is_sqlite_sidecar(entry.relpath, heads):
            return
        found = FoundFile(
            entry.relpath,
            st.st_size,
            stat.S_IMODE(st.st_mode),
            st.st_mtime_ns,
            st.st_ino,
            st.st_dev,
        )
        is_db = entry.head == SQLITE_HEADER
        (selection.databases if is_db else selection.files).append(found)
    else:
        if entry.kind == "refused":
            log_event("backup.scan.skipped", path=entry.relpath, reason=entry.reason)
        if entry.kind == "unreadable":  # private to its owner: in no backup, said loudly
            log_event(
                "backup.scan.unreadable", level="warning", path=entry.relpath, reason=entry.reason
            )
        selection.skipped_special.append(entry.relpath)  # sockets, FIFOs, devices, private


def _is_sqlite_sidecar(relpath: str, heads: dict[str, bytes]) -> bool:
    return any(heads.get(main) == SQLITE_HEADER for main in _mains(relpath))

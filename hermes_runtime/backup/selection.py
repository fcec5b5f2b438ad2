"""Which files of the data dir a backup takes, and how it classifies them.

SQLite databases are found by their 16-byte header, not their name, because
Hermes and its plugins create databases under many names. Everything that
can be rebuilt (Git checkouts, caches) or must never leave the pod (secrets)
is excluded by default; see docs/backup.md for the list and the reasons.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")
STAGING_PREFIX = ".hermes-restore-"

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
    """What a scan of the data dir found, already split by kind."""

    databases: list[FoundFile] = field(default_factory=list)
    files: list[FoundFile] = field(default_factory=list)
    links: list[FoundLink] = field(default_factory=list)
    dirs: list[FoundDir] = field(default_factory=list)
    skipped_special: list[str] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.databases) + sum(f.size for f in self.files)


def is_sqlite_file(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def _is_sqlite_sidecar(path: Path) -> bool:
    for suffix in SQLITE_SIDE_SUFFIXES:
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            main = path.with_name(path.name[: -len(suffix)])
            if is_sqlite_file(main):
                return True
    return False


def scan_data_dir(data_dir: Path, excluder: Excluder) -> Selection:
    """Walk ``data_dir`` without following symlinks and classify every entry."""
    selection = Selection()
    for relpath, entry in _walk(data_dir, "", excluder):
        try:
            st = entry.stat(follow_symlinks=False)
            link_target = os.readlink(entry.path) if stat.S_ISLNK(st.st_mode) else ""
        except FileNotFoundError:
            continue  # removed while we walked: it is not part of this snapshot
        if stat.S_ISLNK(st.st_mode):
            selection.links.append(FoundLink(relpath, link_target))
        elif stat.S_ISDIR(st.st_mode):
            selection.dirs.append(FoundDir(relpath, stat.S_IMODE(st.st_mode)))
        elif stat.S_ISREG(st.st_mode):
            path = Path(entry.path)
            if _is_sqlite_sidecar(path):
                continue
            found = FoundFile(
                relpath, st.st_size, stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_ino
            )
            (selection.databases if is_sqlite_file(path) else selection.files).append(found)
        else:
            selection.skipped_special.append(relpath)  # sockets, FIFOs, devices
    return selection


def _walk(root: Path, prefix: str, excluder: Excluder) -> Iterator[tuple[str, os.DirEntry[str]]]:
    try:
        entries = sorted(os.scandir(root / prefix if prefix else root), key=lambda e: e.name)
    except FileNotFoundError:
        return
    for entry in entries:
        relpath = f"{prefix}/{entry.name}" if prefix else entry.name
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if excluder.excluded(relpath, is_dir):
            continue
        yield relpath, entry
        if is_dir:
            yield from _walk(root, relpath, excluder)

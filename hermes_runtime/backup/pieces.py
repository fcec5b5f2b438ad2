"""Database snapshots handed to restic as fixed-size, page-aligned pieces, and put back together.

Why: restic cuts a file into content-defined chunks of 512 KiB to 8 MiB (about 1 MiB on
average). Appending to an SQLite database changes a few scattered 4 KiB pages (the b-tree's
right edge, FTS5 segments, the header page), and each changed page makes restic store its
whole chunk again. Pieces of ``PIECE_SIZE`` bytes, smaller than restic's minimum chunk, are
one blob each: a changed page costs one piece. Figures: docs/benchmarks.md (Backup).

Layout inside a snapshot: ``.hermes-backup/pieces/<database path>/<index>``, the index
zero-padded to ``INDEX_DIGITS`` digits, so that sorting the names sorts the pieces. Putting
a database back is concatenating its pieces in that order (``cat``; docs/backup.md).

Each piece's mtime is derived from its content's SHA-256 (``content_mtime_ns``): restic runs
with ``--ignore-inode --ignore-ctime`` and compares a file's size and mtime with its parent
snapshot's, so a piece whose bytes did not change is not read or hashed again, though it is a
new file in a new scratch folder. A changed piece gets another mtime (60 bits of its digest);
were two digests to agree on those bits, restore's SHA-256 of the whole database would fail,
never pass a wrong byte. Splitting never holds more than the database's size plus
``TRUNCATE_EVERY`` pieces (8 MiB) on disk: the snapshot is cut from its end.

Joining reads the pieces from one tar stream (``restic dump`` of the pieces folder) and
writes only the databases, hashing them on the way: no piece ever lands on disk at restore.
"""

from __future__ import annotations

import hashlib
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from hermes_runtime.common.errors import RuntimeFailure

PIECES_DIR = "pieces"  # inside the manifest's folder (.hermes-backup)
# A multiple of every SQLite page size (512 B to 64 KiB). 512 KiB: after +1% messages in a
# 1 GiB database with FTS5 restic added 0.84% of it (256 KiB: 0.60%, 1 MiB: 0.85%, one file
# cut by restic: 1.01%; the goal is 6%), and a create took 5.8 s (256 KiB: 6.4-6.8 s, 1 MiB:
# 6.2 s): half the files of 256 KiB to create, scan and stream (docs/benchmarks.md).
PIECE_SIZE = 512 << 10
INDEX_DIGITS = 8
# The snapshot is truncated after every TRUNCATE_EVERY pieces, not after each one: an
# ftruncate that frees blocks took about 0.6 ms when profiling a 256 MB database (2,000
# pieces, over 1 s of its split), for 8 MiB of scratch space at most.
TRUNCATE_EVERY = 64
PIECE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
# Piece mtimes lie in [2000-01-01, 2000-01-01 + 2**60 ns), about 36 years.
MTIME_BASE_NS = 946_684_800 * 10**9
MTIME_SPAN_NS = 1 << 60


@dataclass(frozen=True)
class PieceSet:
    """Where a database's pieces are (relative to the snapshot root), their size and count."""

    dir: str
    piece_size: int
    count: int
    size: int


def piece_name(index: int) -> str:
    return f"{index:0{INDEX_DIGITS}d}"


def split_into_pieces(
    snapshot: Path, root: Path, pieces_dir: str, piece_size: int, *, keep_source: bool = False
) -> PieceSet:
    """Turn the file ``snapshot`` into pieces under ``root / pieces_dir``; ``snapshot`` is gone.

    Cut from the end, truncating the snapshot every ``TRUNCATE_EVERY`` pieces, so the scratch
    space needs only the snapshot's size plus that many pieces. ``keep_source`` leaves the
    snapshot whole (something else still reads it), for twice its size in scratch space.
    """
    size = snapshot.stat().st_size
    count = -(-size // piece_size)
    folder = root / pieces_dir
    folder.mkdir(parents=True, exist_ok=True)
    buffer = memoryview(bytearray(piece_size))
    with snapshot.open("rb" if keep_source else "r+b") as source:
        for index in reversed(range(count)):
            offset = index * piece_size
            data = buffer[: min(piece_size, size - offset)]
            _read_at(source.fileno(), data, offset, snapshot)
            _write_piece(folder / piece_name(index), data)
            if index % TRUNCATE_EVERY == 0 and not keep_source:
                source.truncate(offset)
    if not keep_source:
        snapshot.unlink()
    return PieceSet(pieces_dir, piece_size, count, size)


@dataclass(frozen=True)
class JoinedDatabase:
    """A database put back together from its pieces: where it is, and what it holds."""

    path: Path
    count: int
    size: int
    sha256: str


@dataclass
class _Joining:
    path: Path
    fd: int
    count: int = 0
    size: int = 0
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)

    def append(self, data: memoryview) -> None:
        self.digest.update(data)
        _write_all(self.fd, data)
        self.count += 1
        self.size += len(data)

    def finish(self) -> JoinedDatabase:
        return JoinedDatabase(self.path, self.count, self.size, self.digest.hexdigest())


def join_piece_stream(stream: IO[bytes], root: Path) -> dict[str, JoinedDatabase]:
    """Write each database in a tar stream of pieces to ``root / <its pieces folder>``.

    The stream is ``restic dump --archive tar`` of the pieces folder: members named
    ``<pieces folder>/<index>``, each folder's pieces in index order. Returns each folder's
    database, with its piece count, size and SHA-256 (hashed as it was written). Why a
    stream: ``restic restore`` would write every piece as a file (4,000 a GiB) for the join
    to read again; creating those files cost more than restic's decryption on a busy
    filesystem. A piece out of order, or anything but folders and files, fails naming it.
    """
    joining: dict[str, _Joining] = {}
    try:
        for name, data in _tar_files(stream):
            folder, _, index = name.rpartition("/")
            database = joining.get(folder) or _start_joining(root / folder, joining, folder)
            if index != piece_name(database.count):
                raise RuntimeFailure(
                    f"piece {name} in the stream: expected {folder}/{piece_name(database.count)}"
                )
            database.append(data)
    finally:
        for database in joining.values():
            os.close(database.fd)
    return {folder: database.finish() for folder, database in joining.items()}


def _start_joining(path: Path, joining: dict[str, _Joining], folder: str) -> _Joining:
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    joining[folder] = _Joining(path, os.open(path, flags, 0o600))  # a database's bytes
    return joining[folder]


TAR_BLOCK = 512


def _tar_files(stream: IO[bytes]) -> Iterator[tuple[str, memoryview]]:
    """The regular files of an uncompressed tar stream, in order: name and content.

    Each content view is valid until the next one. Why not ``tarfile``: its stream mode
    copies its buffer for every header and took 5 s for the 4,000 pieces of a 1 GiB database
    that this loop reads in under 1 s. Headers are still parsed by ``tarfile``; a PAX
    header's ``path`` (restic writes one for a name over 100 bytes) names the next member.
    """
    header = bytearray(TAR_BLOCK)
    buffer = bytearray(PIECE_SIZE)
    pax_path: str | None = None
    while True:
        _read_exactly(stream, memoryview(header))
        if not any(header):
            return
        try:
            info = tarfile.TarInfo.frombuf(bytes(header), "utf-8", "surrogateescape")
        except tarfile.HeaderError as exc:
            raise RuntimeFailure(f"the pieces stream holds a damaged tar header: {exc}") from exc
        padded = -(-info.size // TAR_BLOCK) * TAR_BLOCK
        if len(buffer) < padded:
            buffer = bytearray(padded)
        data = memoryview(buffer)[:padded]
        _read_exactly(stream, data)
        if info.type == tarfile.XHDTYPE:
            pax_path = _pax_path(bytes(data[: info.size])) or pax_path
        elif info.isreg():
            yield pax_path or info.name, data[: info.size]
            pax_path = None
        elif info.isdir() or info.type == tarfile.XGLTYPE:
            pax_path = None
        else:
            raise RuntimeFailure(
                f"{pax_path or info.name} in the pieces stream is neither a piece nor a folder"
            )


def _pax_path(records: bytes) -> str | None:
    """The ``path`` of PAX extended-header records (``"<length> <key>=<value>\n"`` each)."""
    path = None
    while records:
        length = int(records.split(b" ", 1)[0])
        key, _, value = records[: length - 1].split(b" ", 1)[1].partition(b"=")
        if key == b"path":
            path = value.decode("utf-8", "surrogateescape")
        records = records[length:]
    return path


def _read_exactly(stream: IO[bytes], view: memoryview) -> None:
    done = 0
    while done < len(view):
        got = stream.readinto(view[done:])  # type: ignore[attr-defined]
        if not got:
            raise RuntimeFailure("the pieces stream ended in the middle of a piece")
        done += got


def content_mtime_ns(data: bytes | memoryview) -> int:
    """The mtime (ns) a piece holding ``data`` gets: the same bytes, the same mtime."""
    digest = hashlib.sha256(data).digest()
    return MTIME_BASE_NS + int.from_bytes(digest[:8], "big") % MTIME_SPAN_NS


def _write_piece(path: Path, data: memoryview) -> None:
    mtime = content_mtime_ns(data)
    piece = os.open(path, PIECE_FLAGS, 0o600)  # a database's bytes
    try:
        _write_all(piece, data)
        os.utime(piece, ns=(mtime, mtime))
    finally:
        os.close(piece)


def _write_all(fd: int, data: memoryview) -> None:
    written = 0
    while written < len(data):
        written += os.write(fd, data[written:])


def _read_at(fd: int, view: memoryview, offset: int, what: Path) -> None:
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got == 0:
            raise RuntimeFailure(f"{what}: ended after {offset + done} bytes")
        done += got

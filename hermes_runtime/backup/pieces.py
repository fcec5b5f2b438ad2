"""Database snapshots handed to restic as fixed-size, page-aligned pieces, and put back together.

Why: restic cuts a file into content-defined chunks of 512 KiB to 8 MiB (about 1 MiB on
average). Appending to an SQLite database changes a few scattered 4 KiB pages (the b-tree's
right edge, FTS5 segments, the header page), and each changed page makes restic store its
whole chunk again. Pieces of ``PIECE_SIZE`` bytes, smaller than restic's minimum chunk, are
one blob each: a changed page costs one piece. Figures: docs/benchmarks.md (Backup).

Layout inside a snapshot: ``.hermes-backup/pieces/<database path>/<index>``, the index
zero-padded to ``INDEX_DIGITS`` digits, so that sorting the names sorts the pieces. Putting
a database back is concatenating its pieces in that order (``cat``; docs/backup.md).

Splitting and joining move bytes with ``copy_file_range`` (in the kernel, a reflink where the
filesystem can) and never hold more than the database's size plus ``TRUNCATE_EVERY`` pieces
(8 MiB) on disk: the snapshot is cut from its end, and pieces are deleted as they are joined.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from hermes_runtime.common.errors import RuntimeFailure

PIECES_DIR = "pieces"  # inside the manifest's folder (.hermes-backup)
# A multiple of every SQLite page size (512 B to 64 KiB). 256 KiB: after +1% messages in a
# 268 MB database with FTS5 restic added 0.87% (0.18% without FTS5), for half the files of
# 128 KiB pieces to write, scan and join; 512 KiB added 1.48% (docs/benchmarks.md).
PIECE_SIZE = 256 << 10
INDEX_DIGITS = 8
# The snapshot is truncated after every TRUNCATE_EVERY pieces, not after each one: an
# ftruncate that frees blocks took about 0.6 ms when profiling a 256 MB database (2,000
# pieces, over 1 s of its split), for 8 MiB of scratch space at most.
TRUNCATE_EVERY = 64
PIECE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC


@dataclass(frozen=True)
class PieceSet:
    """Where a database's pieces are (relative to the snapshot root), their size and count."""

    dir: str
    piece_size: int
    count: int
    size: int


def piece_name(index: int) -> str:
    return f"{index:0{INDEX_DIGITS}d}"


def split_into_pieces(snapshot: Path, root: Path, pieces_dir: str, piece_size: int) -> PieceSet:
    """Turn the file ``snapshot`` into pieces under ``root / pieces_dir``; ``snapshot`` is gone.

    Cut from the end, truncating the snapshot every ``TRUNCATE_EVERY`` pieces, so the scratch
    space needs only the snapshot's size plus that many pieces.
    """
    size = snapshot.stat().st_size
    count = -(-size // piece_size)
    folder = root / pieces_dir
    folder.mkdir(parents=True, exist_ok=True)
    with snapshot.open("r+b") as source:
        for index in reversed(range(count)):
            offset = index * piece_size
            length = min(piece_size, size - offset)
            piece = os.open(folder / piece_name(index), PIECE_FLAGS, 0o600)  # a database's bytes
            try:
                _copy_range(source.fileno(), piece, offset, length, snapshot)
            finally:
                os.close(piece)
            if index % TRUNCATE_EVERY == 0:
                source.truncate(offset)
    snapshot.unlink()
    return PieceSet(pieces_dir, piece_size, count, size)


def join_pieces(root: Path, pieces: PieceSet, dest: Path) -> None:
    """Concatenate the pieces into the new file ``dest``, deleting each once it is copied.

    A missing or wrongly sized piece fails naming it; the caller's staging folder is then
    discarded as a whole.
    """
    folder = root / pieces.dir
    with dest.open("xb") as out:
        for index in range(pieces.count):
            path = folder / piece_name(index)
            expected = min(pieces.piece_size, pieces.size - index * pieces.piece_size)
            try:
                with path.open("rb") as piece:
                    length = os.fstat(piece.fileno()).st_size
                    if length != expected:
                        raise RuntimeFailure(f"piece {path}: {length} bytes, expected {expected}")
                    _copy_range(piece.fileno(), out.fileno(), 0, length, path)
            except FileNotFoundError as exc:
                raise RuntimeFailure(f"piece {path} is missing from the snapshot") from exc
            path.unlink()
    if dest.stat().st_size != pieces.size:
        raise RuntimeFailure(f"{dest}: {dest.stat().st_size} bytes joined, expected {pieces.size}")


# copy_file_range refused by the filesystem: copy through user space instead.
NO_KERNEL_COPY = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP)


def _copy_range(src: int, dst: int, offset: int, length: int, what: Path) -> None:
    """Copy ``length`` bytes at ``offset`` of ``src`` to the current end of ``dst``."""
    done = 0
    while done < length:
        try:
            moved = os.copy_file_range(src, dst, length - done, offset + done)
        except OSError as exc:
            if exc.errno not in NO_KERNEL_COPY:
                raise
            moved = os.write(dst, os.pread(src, length - done, offset + done))
        if moved == 0:
            raise RuntimeFailure(f"{what}: ended after {offset + done} bytes")
        done += moved

"""Database snapshots as fixed-size pieces: split, join from a tar stream, and damaged streams.

The streams are written by Python's ``tarfile`` in the formats restic's ``dump --archive tar``
writes (ustar, and PAX for a long name); the integration tests join real restic dumps.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from hermes_runtime.backup.pieces import (
    TRUNCATE_EVERY,
    JoinedDatabase,
    PieceSet,
    content_mtime_ns,
    join_piece_stream,
    piece_name,
    split_into_pieces,
)
from hermes_runtime.common.errors import RuntimeFailure

PIECE = 16 << 10


def _snapshot(path: Path, size: int) -> bytes:
    data = os.urandom(size)
    path.write_bytes(data)
    return data


def _tar_of(root: Path, folders: list[str], fmt: int = tarfile.USTAR_FORMAT) -> io.BytesIO:
    """What ``restic dump --archive tar`` of the pieces folder streams: folders, then pieces."""
    stream = io.BytesIO()
    with tarfile.open(fileobj=stream, mode="w", format=fmt) as tar:
        for folder in folders:
            tar.add(root / folder, arcname=folder, recursive=False)
            for piece in sorted((root / folder).iterdir()):
                tar.add(piece, arcname=f"{folder}/{piece.name}")
    stream.seek(0)
    return stream


def _join(root: Path, stream: io.BytesIO) -> dict[str, JoinedDatabase]:
    return join_piece_stream(stream, root / "joined")


def test_split_then_join_gives_the_same_bytes_and_leaves_no_piece(tmp_path: Path) -> None:
    data = _snapshot(tmp_path / "lcm.db", 5 * PIECE + 4096)  # the last piece is short
    pieces = split_into_pieces(tmp_path / "lcm.db", tmp_path, ".p/lcm.db", PIECE)
    assert pieces == PieceSet(".p/lcm.db", PIECE, 6, len(data))
    assert not (tmp_path / "lcm.db").exists()
    names = sorted(p.name for p in (tmp_path / ".p" / "lcm.db").iterdir())
    assert names == [piece_name(i) for i in range(6)] == ["00000000", *names[1:]]
    assert (tmp_path / ".p" / "lcm.db" / piece_name(2)).read_bytes() == data[2 * PIECE : 3 * PIECE]
    assert b"".join((tmp_path / ".p" / "lcm.db" / n).read_bytes() for n in names) == data, (
        "sorted names concatenate to the database (what `cat` does)"
    )

    joined = _join(tmp_path, _tar_of(tmp_path, [".p/lcm.db"]))
    digest = hashlib.sha256(data).hexdigest()
    path = tmp_path / "joined" / ".p" / "lcm.db"
    assert joined == {".p/lcm.db": JoinedDatabase(path, 6, len(data), digest)}
    assert path.read_bytes() == data


def test_pieces_across_several_truncations_join_back(tmp_path: Path) -> None:
    """More pieces than one truncation step: every piece still holds its own bytes."""
    count = 2 * TRUNCATE_EVERY + 3
    data = _snapshot(tmp_path / "lcm.db", count * 512 - 100)
    pieces = split_into_pieces(tmp_path / "lcm.db", tmp_path, "p", 512)
    assert pieces.count == count
    joined = _join(tmp_path, _tar_of(tmp_path, ["p"]))
    assert joined["p"].path.read_bytes() == data


def test_an_empty_database_is_zero_pieces(tmp_path: Path) -> None:
    (tmp_path / "empty.db").write_bytes(b"")
    pieces = split_into_pieces(tmp_path / "empty.db", tmp_path, "p", PIECE)
    assert pieces.count == 0
    assert _join(tmp_path, _tar_of(tmp_path, ["p"])) == {}, "no piece: nothing to join"


def test_several_databases_and_long_names_join_from_one_stream(tmp_path: Path) -> None:
    """Nested paths, a name past ustar's 100 bytes (restic then writes a PAX header)."""
    long_folder = "p/" + "agents/" * 20 + "state.db"
    first = _snapshot(tmp_path / "a.db", 3 * PIECE + 1)
    second = _snapshot(tmp_path / "b.db", PIECE)
    split_into_pieces(tmp_path / "a.db", tmp_path, "p/sub/lcm.db", PIECE)
    split_into_pieces(tmp_path / "b.db", tmp_path, long_folder, PIECE)
    stream = _tar_of(tmp_path, ["p/sub/lcm.db", long_folder], fmt=tarfile.PAX_FORMAT)
    joined = _join(tmp_path, stream)
    assert joined["p/sub/lcm.db"].path.read_bytes() == first
    assert joined[long_folder].path.read_bytes() == second
    assert joined[long_folder].sha256 == hashlib.sha256(second).hexdigest()


def test_a_piece_out_of_order_or_missing_fails_naming_it(tmp_path: Path) -> None:
    _snapshot(tmp_path / "a.db", 3 * PIECE)
    split_into_pieces(tmp_path / "a.db", tmp_path, "p", PIECE)
    (tmp_path / "p" / piece_name(1)).unlink()
    with pytest.raises(
        RuntimeFailure, match=f"piece p/{piece_name(2)} .*expected p/{piece_name(1)}"
    ):
        _join(tmp_path, _tar_of(tmp_path, ["p"]))


def test_a_stream_cut_short_or_damaged_fails(tmp_path: Path) -> None:
    _snapshot(tmp_path / "a.db", 3 * PIECE)
    split_into_pieces(tmp_path / "a.db", tmp_path, "p", PIECE)
    whole = _tar_of(tmp_path, ["p"]).getvalue()
    with pytest.raises(RuntimeFailure, match="stream ended"):
        join_piece_stream(io.BytesIO(whole[: 2 * PIECE]), tmp_path / "cut")
    damaged = bytearray(whole)
    damaged[2 * 512 + PIECE + 10] ^= (
        0xFF  # in the second piece's header (after the folder's, the first piece)
    )
    with pytest.raises(RuntimeFailure, match="damaged tar header"):
        join_piece_stream(io.BytesIO(bytes(damaged)), tmp_path / "damaged")


def test_anything_but_pieces_and_folders_is_refused(tmp_path: Path) -> None:
    _snapshot(tmp_path / "a.db", PIECE)
    split_into_pieces(tmp_path / "a.db", tmp_path, "p", PIECE)
    os.symlink("/etc/passwd", tmp_path / "p" / piece_name(1))
    with pytest.raises(RuntimeFailure, match=f"p/{piece_name(1)} .*neither a piece nor a folder"):
        _join(tmp_path, _tar_of(tmp_path, ["p"]))


def test_a_piece_cut_again_keeps_its_mtime_and_a_changed_one_does_not(tmp_path: Path) -> None:
    """restic skips a file whose size and mtime match its parent's: only changed pieces differ."""
    data = bytearray(_snapshot(tmp_path / "a.db", 4 * PIECE))
    split_into_pieces(tmp_path / "a.db", tmp_path, "first", PIECE)
    data[2 * PIECE + 100] ^= 0x01  # one bit in the third piece
    (tmp_path / "b.db").write_bytes(data)
    split_into_pieces(tmp_path / "b.db", tmp_path, "second", PIECE)

    def mtimes(folder: str) -> list[int]:
        return [(tmp_path / folder / piece_name(i)).stat().st_mtime_ns for i in range(4)]

    first, second = mtimes("first"), mtimes("second")
    assert [a == b for a, b in zip(first, second, strict=True)] == [True, True, False, True]
    assert len(set(first)) == 4, "different bytes, different mtimes"
    assert all(
        t == content_mtime_ns(data[i * PIECE : (i + 1) * PIECE]) for i, t in enumerate(second)
    )

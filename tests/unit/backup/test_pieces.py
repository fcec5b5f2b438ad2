"""Database snapshots as fixed-size pieces: split, join, and what a damaged set does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermes_runtime.backup.pieces import (
    TRUNCATE_EVERY,
    PieceSet,
    join_pieces,
    piece_name,
    split_into_pieces,
)
from hermes_runtime.common.errors import RuntimeFailure

PIECE = 16 << 10


def _snapshot(path: Path, size: int) -> bytes:
    data = os.urandom(size)
    path.write_bytes(data)
    return data


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

    join_pieces(tmp_path, pieces, tmp_path / "restored.db")
    assert (tmp_path / "restored.db").read_bytes() == data
    assert list((tmp_path / ".p" / "lcm.db").iterdir()) == []


def test_pieces_across_several_truncations_join_back(tmp_path: Path) -> None:
    """More pieces than one truncation step: every piece still holds its own bytes."""
    count = 2 * TRUNCATE_EVERY + 3
    data = _snapshot(tmp_path / "lcm.db", count * 512 - 100)
    pieces = split_into_pieces(tmp_path / "lcm.db", tmp_path, "p", 512)
    assert pieces.count == count
    join_pieces(tmp_path, pieces, tmp_path / "restored.db")
    assert (tmp_path / "restored.db").read_bytes() == data


def test_an_empty_database_is_zero_pieces(tmp_path: Path) -> None:
    (tmp_path / "empty.db").write_bytes(b"")
    pieces = split_into_pieces(tmp_path / "empty.db", tmp_path, "p", PIECE)
    assert pieces.count == 0
    join_pieces(tmp_path, pieces, tmp_path / "back.db")
    assert (tmp_path / "back.db").read_bytes() == b""


def test_a_missing_or_short_piece_fails_naming_it(tmp_path: Path) -> None:
    _snapshot(tmp_path / "a.db", 3 * PIECE)
    pieces = split_into_pieces(tmp_path / "a.db", tmp_path, "p", PIECE)
    (tmp_path / "p" / piece_name(1)).unlink()
    with pytest.raises(RuntimeFailure, match=f"piece .*{piece_name(1)} is missing"):
        join_pieces(tmp_path, pieces, tmp_path / "x.db")

    _snapshot(tmp_path / "b.db", 3 * PIECE)
    pieces = split_into_pieces(tmp_path / "b.db", tmp_path, "q", PIECE)
    (tmp_path / "q" / piece_name(2)).write_bytes(b"short")
    with pytest.raises(RuntimeFailure, match=f"{piece_name(2)}: 5 bytes, expected {PIECE}"):
        join_pieces(tmp_path, pieces, tmp_path / "y.db")

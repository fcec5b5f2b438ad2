"""Which copy a restore takes: by the time of the last transaction each copy holds.

The replica's time comes from the LTX headers Litestream writes (format: superfly/ltx,
``Header.MarshalBinary``: big-endian magic, flags, page size, commit, min and max TXID,
milliseconds), never from when a file was written. The end-to-end hazard, with the real
Litestream, is tests/integration/backup/test_continuous.py.
"""

from __future__ import annotations

import os
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hermes_runtime.backup import replica_location
from hermes_runtime.backup.replica_order import (
    CLOCK_MARGIN,
    ResticCopies,
    last_transaction_at,
    parse_ltx_key,
    replica_files,
)
from hermes_runtime.common.errors import RuntimeFailure

BACKUP = datetime(2026, 12, 1, 3, 17, tzinfo=UTC)
LCM_ENDED = BACKUP + timedelta(seconds=4)
COPIES = ResticCopies(BACKUP, {"lcm.db": LCM_ENDED})


def write_ltx(root: Path, level: int, low: int, high: int, at: datetime) -> Path:
    """An LTX file's header as Litestream writes it (file replica layout: ``ltx/<level>``)."""
    path = (
        root
        / "litestream"
        / "hermes-runtime"
        / "lcm.db"
        / "ltx"
        / str(level)
        / f"{low:016x}-{high:016x}.ltx"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    millis = int(at.timestamp() * 1000)
    header = struct.pack(">4sIIIQQq", b"LTX1", 2, 4096, 10, low, high, millis)
    path.write_bytes(header.ljust(100, b"\0") + b"\0" * 4096)
    return path


def test_a_replica_wins_only_past_the_copy_and_the_clock_margin() -> None:
    assert COPIES.replica_wins("lcm.db", LCM_ENDED + CLOCK_MARGIN + timedelta(milliseconds=1))
    assert not COPIES.replica_wins("lcm.db", LCM_ENDED + CLOCK_MARGIN)  # a tie: restic
    assert not COPIES.replica_wins("lcm.db", LCM_ENDED)  # read during the snapshot: doubt
    assert not COPIES.replica_wins("lcm.db", BACKUP - timedelta(hours=3))
    assert not COPIES.replica_wins("lcm.db", None)  # no proof: restic


def test_a_database_absent_from_the_snapshot_comes_back_only_if_born_after_it() -> None:
    assert COPIES.replica_wins("late.db", BACKUP + timedelta(milliseconds=1))
    assert not COPIES.replica_wins("gone.db", BACKUP - timedelta(minutes=1))
    assert not COPIES.replica_wins("late.db", None)


def test_without_a_snapshot_every_replica_comes_back() -> None:
    none = ResticCopies(None, {})
    assert none.replica_wins("lcm.db", None)
    assert none.replica_wins("lcm.db", BACKUP)


@pytest.mark.parametrize(
    ("key", "level", "low", "high"),
    [
        ("lcm.db/ltx/0/0000000000000001-0000000000000001.ltx", 0, 1, 1),  # file replica
        ("lcm.db/0009/0000000000000001-00000000000004d2.ltx", 9, 1, 0x4D2),  # S3 replica
        ("sub/x.db/0002/0000000000000010-00000000000000ff.ltx", 2, 0x10, 0xFF),
    ],
)
def test_ltx_keys_name_level_and_transactions(key: str, level: int, low: int, high: int) -> None:
    parsed = parse_ltx_key(key)
    assert parsed is not None
    assert (parsed.level, parsed.min_txid, parsed.max_txid) == (level, low, high)


def test_the_time_is_the_last_transactions_not_the_newest_files(tmp_path: Path) -> None:
    location = replica_location(f"file://{tmp_path}", environ={})
    read_at = BACKUP - timedelta(minutes=10)
    write_ltx(tmp_path, 0, 1, 6, read_at - timedelta(minutes=1))
    level0 = write_ltx(tmp_path, 0, 7, 7, read_at)  # transaction 7: read from the WAL then
    compacted = write_ltx(tmp_path, 1, 1, 7, read_at)  # its compaction copies that time...
    later = (BACKUP + timedelta(minutes=5)).timestamp()
    os.utime(compacted, (later, later))  # ...whenever (and with whatever mtime) it is written
    write_ltx(tmp_path, 9, 1, 7, BACKUP + timedelta(hours=1))  # a snapshot written much later
    files = replica_files(location)["lcm.db"]
    assert len(files) == 4
    assert last_transaction_at(location, files, 7) == read_at
    level0.unlink()  # compacted: Litestream deletes level 0 after a while
    files = replica_files(location)["lcm.db"]
    assert last_transaction_at(location, files, 7) == read_at
    assert not COPIES.replica_wins("lcm.db", last_transaction_at(location, files, 7))


def test_only_a_snapshot_ending_there_proves_nothing(tmp_path: Path) -> None:
    location = replica_location(f"file://{tmp_path}", environ={})
    write_ltx(tmp_path, 9, 1, 7, BACKUP + timedelta(hours=1))
    assert last_transaction_at(location, replica_files(location)["lcm.db"], 7) is None


def test_a_file_whose_header_disagrees_with_its_name_fails_naming_it(tmp_path: Path) -> None:
    location = replica_location(f"file://{tmp_path}", environ={})
    bad = write_ltx(tmp_path, 0, 7, 7, BACKUP)
    bad.write_bytes(b"not an LTX file".ljust(200, b"\0"))
    with pytest.raises(RuntimeFailure, match=r"0000000000000007-0000000000000007\.ltx"):
        last_transaction_at(location, replica_files(location)["lcm.db"], 7)
    bad.write_bytes(b"LTX1")
    with pytest.raises(RuntimeFailure, match="truncated"):
        last_transaction_at(location, replica_files(location)["lcm.db"], 7)

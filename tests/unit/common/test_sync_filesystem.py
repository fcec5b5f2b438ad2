"""sync_filesystem: syncfs(2) on the filesystem of a path, before a restore's renames.

What it promises (the data on the disk after a power cut) needs a crash harness this
machine does not have; these tests hold what can be checked here: it runs on a folder and
on a file of a real filesystem, and a path that is not there fails naming it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermes_runtime.common.atomic import sync_filesystem


def test_it_syncs_the_filesystem_of_a_folder_and_of_a_file(tmp_path: Path) -> None:
    written = tmp_path / "stage" / "lcm.db"
    written.parent.mkdir()
    written.write_bytes(os.urandom(1 << 20))  # dirty pages, never fsynced
    sync_filesystem(written.parent)
    sync_filesystem(written)
    assert written.stat().st_size == 1 << 20


def test_a_missing_path_fails_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        sync_filesystem(missing)

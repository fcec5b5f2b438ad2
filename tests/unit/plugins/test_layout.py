"""Ownership of entries in D/plugins and the link text."""

from __future__ import annotations

import os
from pathlib import Path

from hermes_runtime.plugins.layout import Layout, owned_link_target


def test_link_target_goes_through_current() -> None:
    assert Layout.link_target("w", "") == "../.git-sync/w/current"
    assert Layout.link_target("w", "a/b") == "../.git-sync/w/current/a/b"


def test_ownership(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    os.symlink("../.git-sync/a/current", tmp_path / "ours")
    os.symlink("../.git-sync/../elsewhere", tmp_path / "sneaky")
    os.symlink("/opt/data/.git-sync/a/current", tmp_path / "absolute")
    os.symlink("../other/a", tmp_path / "user-link")
    assert owned_link_target(tmp_path / "ours") == "../.git-sync/a/current"
    for name in ("dir", "file", "sneaky", "absolute", "user-link", "missing"):
        assert owned_link_target(tmp_path / name) is None, name

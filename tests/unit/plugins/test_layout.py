"""Ownership of entries in D/plugins, the link text, and how a tree's size is counted."""

from __future__ import annotations

import os
from pathlib import Path

from hermes_runtime.plugins.layout import Layout, owned_link_target, tree_bytes


def test_link_target_names_the_worktree_not_current() -> None:
    assert Layout.link_target("w", ".worktrees/abc", "") == "../.git-sync/w/.worktrees/abc"
    assert Layout.link_target("w", ".worktrees/abc", "a/b") == "../.git-sync/w/.worktrees/abc/a/b"


def test_ownership(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    os.symlink("../.git-sync/a/.worktrees/abc", tmp_path / "ours")
    os.symlink("../.git-sync/a/current", tmp_path / "ours-before-issue-28")
    os.symlink("../.git-sync/../elsewhere", tmp_path / "sneaky")
    os.symlink("/opt/data/.git-sync/a/current", tmp_path / "absolute")
    os.symlink("../other/a", tmp_path / "user-link")
    assert owned_link_target(tmp_path / "ours") == "../.git-sync/a/.worktrees/abc"
    assert owned_link_target(tmp_path / "ours-before-issue-28") == "../.git-sync/a/current"
    for name in ("dir", "file", "sneaky", "absolute", "user-link", "missing"):
        assert owned_link_target(tmp_path / name) is None, name


def test_tree_bytes_counts_files_once_and_follows_no_symlink(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub" / "deeper").mkdir(parents=True)
    (tree / "a.bin").write_bytes(b"x" * 1000)
    (tree / "sub" / "deeper" / "b.bin").write_bytes(b"y" * 234)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "huge.bin").write_bytes(b"z" * 100_000)
    os.symlink("a.bin", tree / "again")
    os.symlink("sub", tree / "sub-again")
    os.symlink(str(outside), tree / "out")
    os.symlink(str(outside / "huge.bin"), tree / "sub" / "huge")
    assert tree_bytes(tree) == 1234

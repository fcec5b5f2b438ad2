"""The group-access rule: the shared umask, and widening a tree without following a link."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from hermes_runtime.common.groupaccess import SHARED_UMASK, share_tree, shared_umask


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_the_shared_umask_holds_inside_is_inherited_and_is_undone(tmp_path: Path) -> None:
    previous = os.umask(0o077)
    try:
        with shared_umask():
            (tmp_path / "file").write_text("x")
            (tmp_path / "folder").mkdir()
            child = subprocess.run(
                [sys.executable, "-c", "import os; print(os.umask(0))"],
                capture_output=True,
                text=True,
                check=True,
            )
        assert os.umask(0o077) == 0o077, "the caller's umask came back"
    finally:
        os.umask(previous)
    assert int(child.stdout) == SHARED_UMASK == 0o002
    assert mode(tmp_path / "file") == 0o664 and mode(tmp_path / "folder") == 0o775


def test_owned_files_and_folders_gain_the_groups_bits_and_keep_the_rest(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "sessions" / "deep").mkdir(parents=True)
    (root / "sessions").chmod(0o700)
    (root / "sessions" / "deep").chmod(0o2700)
    (root / "state.db").write_text("db")
    (root / "state.db").chmod(0o600)
    (root / "sessions" / "deep" / "run.sh").write_text("#!/bin/sh\n")
    (root / "sessions" / "deep" / "run.sh").chmod(0o704)
    root.chmod(0o750)
    shared = share_tree(root)
    assert mode(root) == 0o770
    assert mode(root / "sessions") == 0o770
    assert mode(root / "sessions" / "deep") == 0o2770  # setgid kept
    assert mode(root / "state.db") == 0o660
    assert mode(root / "sessions" / "deep" / "run.sh") == 0o764  # no group execute added
    assert (shared.widened, shared.not_owned) == (5, 0)
    assert share_tree(root).widened == 0, "a second walk changes nothing"


def test_links_are_never_followed_nor_changed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "secret").write_text("s")
    for path in (outside, outside / "inner", outside / "secret"):
        path.chmod(0o700 if path.is_dir() else 0o600)
    root = tmp_path / "data"
    root.mkdir()
    (root / "to-file").symlink_to(outside / "secret")
    (root / "to-folder").symlink_to(outside)
    share_tree(root)
    assert [mode(p) for p in (outside, outside / "inner", outside / "secret")] == [
        0o700,
        0o700,
        0o600,
    ]


def test_an_entry_swapped_for_a_link_during_the_walk_is_left_alone(tmp_path: Path) -> None:
    """``skip`` runs for each entry before it is opened: the hook swaps the file and the
    folder for links to outside, as the agent's shell could between listing and opening."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    (outside / "secret").chmod(0o600)
    outside.chmod(0o700)
    root = tmp_path / "data"
    (root / "folder").mkdir(parents=True)
    (root / "file").write_text("f")

    def swap(relpath: str, is_dir: bool) -> bool:
        entry = root / relpath
        if entry.is_dir() and not entry.is_symlink():
            entry.rmdir()
            entry.symlink_to(outside)
        elif not entry.is_symlink():
            entry.unlink()
            entry.symlink_to(outside / "secret")
        return False

    share_tree(root, swap)
    assert mode(outside) == 0o700 and mode(outside / "secret") == 0o600


def test_what_another_uid_owns_and_what_skip_names_are_left_alone(tmp_path: Path) -> None:
    """Run as root here, so the walk's own UID is 0; the restore's file belongs to 10004."""
    root = tmp_path / "data"
    (root / ".git-sync" / "plugin").mkdir(parents=True)
    (root / ".git-sync" / "plugin" / "x.py").write_text("x")
    (root / ".git-sync" / "plugin" / "x.py").chmod(0o644)
    (root / "restored.db").write_text("r")
    (root / "restored.db").chmod(0o600)
    os.chown(root / "restored.db", 10004, 10000)
    os.mkfifo(root / "fifo", 0o600)
    shared = share_tree(root, lambda relpath, is_dir: relpath == ".git-sync")
    assert mode(root / ".git-sync" / "plugin" / "x.py") == 0o644
    assert mode(root / ".git-sync") == 0o755 and mode(root / ".git-sync" / "plugin") == 0o755
    assert mode(root / "restored.db") == 0o600 and shared.not_owned == 1
    assert mode(root / "fifo") == 0o600


def test_new_databases_are_created_group_writable_by_sqlite3_and_ours(tmp_path: Path) -> None:
    """SQLite alone creates 0644 whatever the umask: replicate could not write them."""
    script = f"""
import os, sqlite3
from hermes_runtime.common.groupaccess import share_new_sqlite3_databases
from hermes_runtime.common.sqlite import connect
os.umask(0o002)
os.chdir({str(tmp_path)!r})
sqlite3.connect("plain.db").execute("CREATE TABLE t(x)")
share_new_sqlite3_databases()
share_new_sqlite3_databases()
db = sqlite3.connect("hermes.db")
db.execute("PRAGMA journal_mode=WAL"); db.execute("CREATE TABLE t(x)"); db.commit()
sqlite3.connect(":memory:").close()
connect("lcm.db").close()
connect("lcm-uri.db", uri=True).close()  # how LCM opens lcm.db and lcm-fts.db
os.umask(0o022)  # a process kubectl exec starts in the agent container
connect("exec.db").close()
"""
    subprocess.run([sys.executable, "-c", script], check=True)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes["plain.db"] == 0o644  # what SQLite does alone
    assert modes["hermes.db"] == 0o664  # its -wal and -shm copy this mode
    assert modes["lcm.db"] == modes["lcm-uri.db"] == modes["exec.db"] == 0o664
    assert ":memory:" not in modes

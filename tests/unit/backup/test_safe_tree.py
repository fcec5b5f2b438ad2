"""The data dir read as hostile input: no link followed at any component, FIFOs and sockets unread.

Every case runs twice: with ``openat2`` (the kernel refuses the links) and with the
component-by-component ``O_NOFOLLOW`` walk used where the kernel lacks it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_runtime.backup import safe_tree
from hermes_runtime.backup.dbsnap import snapshot_database
from hermes_runtime.backup.dbsource import HeldDatabase
from hermes_runtime.backup.manifest import MANIFEST_DIR, TreeManifest, write_manifest
from hermes_runtime.backup.safe_tree import Refused, copy_file, open_beneath, open_root, walk
from hermes_runtime.backup.selection import make_excluder, scan_data_dir
from hermes_runtime.common.sqlite import connect


@pytest.fixture(params=["openat2", "step-by-step"], autouse=True)
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "openat2" and not safe_tree.OPENAT2:
        pytest.skip("this kernel has no openat2")
    monkeypatch.setattr(safe_tree, "OPENAT2", request.param == "openat2")
    return str(request.param)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """data/ with a nested file, and outside/ with a file of the same relative name."""
    (tmp_path / "data" / "notes" / "deep").mkdir(parents=True)
    (tmp_path / "data" / "notes" / "deep" / "a.txt").write_text("inside\n")
    (tmp_path / "outside" / "deep").mkdir(parents=True)
    (tmp_path / "outside" / "deep" / "a.txt").write_text("OUTSIDE\n")
    return tmp_path / "data"


@pytest.fixture
def root(tree: Path) -> Iterator[int]:
    fd = open_root(tree)
    yield fd
    os.close(fd)


def read_beneath(root_fd: int, relpath: str) -> bytes:
    fd = open_beneath(root_fd, relpath, safe_tree.FILE_FLAGS)
    try:
        return os.read(fd, 100)
    finally:
        os.close(fd)


def test_a_plain_path_opens(root: int) -> None:
    assert read_beneath(root, "notes/deep/a.txt") == b"inside\n"


@pytest.mark.parametrize("swapped", ["notes", "notes/deep", "notes/deep/a.txt"])
def test_a_link_at_any_component_is_refused(tree: Path, root: int, swapped: str) -> None:
    target = tree.parent / "outside" / ("deep/a.txt" if swapped.endswith(".txt") else "")
    if swapped == "notes/deep":
        target = tree.parent / "outside" / "deep"
    (tree / swapped).rename(tree.parent / "moved")
    (tree / swapped).symlink_to(target)
    with pytest.raises(Refused, match=r"link.* on the way"):
        read_beneath(root, "notes/deep/a.txt")


def test_a_path_that_climbs_out_is_refused_before_any_open(root: int) -> None:
    with pytest.raises(ValueError, match="plain parts"):
        open_beneath(root, "notes/../../outside/deep/a.txt", safe_tree.FILE_FLAGS)


def test_a_fifo_and_a_socket_are_refused_without_waiting(tree: Path, root: int) -> None:
    os.mkfifo(tree / "pipe")  # no writer: a blocking open would wait forever
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tree / "s"))
    dest = os.open(tree.parent / "dest", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with pytest.raises(Refused, match="no longer a regular file"):
            copy_file(root, "pipe", dest)
        with pytest.raises(Refused, match="a socket"):
            copy_file(root, "s", dest)
    finally:
        os.close(dest)
        sock.close()
    assert (tree.parent / "dest").read_bytes() == b""


def test_copy_file_copies_and_reports_the_file_unchanged(tree: Path, root: int) -> None:
    big = os.urandom(3 << 20)
    (tree / "big.bin").write_bytes(big)
    dest = os.open(tree.parent / "copy", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        copied = copy_file(root, "big.bin", dest)
    finally:
        os.close(dest)
    assert (tree.parent / "copy").read_bytes() == big
    assert not copied.changed and copied.before.st_size == len(big)


def test_the_walk_stores_links_as_text_and_never_enters_them(tree: Path, root: int) -> None:
    (tree / "proc").symlink_to("/proc/self")
    (tree / "out").symlink_to("../outside")
    os.mkfifo(tree / "pipe")
    entries = {e.relpath: e for e in walk(root, lambda relpath, is_dir: False)}
    assert sorted(entries) == [
        "notes", "notes/deep", "notes/deep/a.txt", "out", "pipe", "proc",
    ]  # fmt: skip
    assert (entries["proc"].kind, entries["proc"].target) == ("link", "/proc/self")
    assert (entries["out"].kind, entries["out"].target) == ("link", "../outside")
    assert entries["pipe"].kind == "special"
    assert entries["notes/deep/a.txt"].head == b"inside\n"


def test_a_planted_manifest_folder_is_left_out_with_a_logged_line(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tree / MANIFEST_DIR).symlink_to(tree.parent / "outside")
    selection = scan_data_dir(tree, make_excluder(defaults=False))
    assert MANIFEST_DIR not in [link.relpath for link in selection.links]
    events = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert {"event": "backup.scan.ignored", "path": MANIFEST_DIR} in [
        {k: e[k] for k in ("event", "path")} for e in events
    ]


def test_the_manifest_is_never_written_through_a_name_already_in_the_stage(tmp_path: Path) -> None:
    stage, outside = tmp_path / "stage", tmp_path / "outside"
    stage.mkdir()
    outside.mkdir()
    (stage / MANIFEST_DIR).symlink_to(outside)
    manifest = TreeManifest(created_at="now", source={}, excludes=[], backup_id="x")
    with pytest.raises(FileExistsError):
        write_manifest(stage, manifest)
    assert list(outside.iterdir()) == []


def make_rows(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = connect(path)
    conn.execute("CREATE TABLE t(body TEXT)")
    conn.execute("INSERT INTO t VALUES (?)", (body,))
    conn.close()


def test_a_database_is_read_in_its_held_folder_after_the_path_is_swapped(tmp_path: Path) -> None:
    data, outside = tmp_path / "data", tmp_path / "outside"
    make_rows(data / "dbs" / "x.db", "inside")
    make_rows(outside / "x.db", "OUTSIDE")
    for leftover in outside.glob("x.db-*"):
        leftover.unlink()
    root = open_root(data)
    folder = open_beneath(root, "dbs", safe_tree.DIR_FLAGS)
    try:
        (data / "dbs").rename(data / "moved")  # the agent swaps the folder for a link out
        (data / "dbs").symlink_to(outside)
        copy = tmp_path / "copy.db"
        snapshot_database(HeldDatabase(folder, "x.db", str(data / "dbs" / "x.db")), copy)
    finally:
        os.close(folder)
        os.close(root)
    conn = connect(copy, readonly=True)
    assert conn.execute("SELECT body FROM t").fetchall() == [("inside",)]
    conn.close()
    assert sorted(p.name for p in outside.iterdir()) == ["x.db"]  # no -wal, -shm made there


def test_a_file_private_to_another_uid_is_left_out_and_said_not_fatal() -> None:
    """The backup and replicate roles run as UIDs of their own: a file the agent made private
    (mode 0600) cannot be read there; the scan goes on and names it (level warning)."""
    root = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        root.chmod(0o755)
        (root / "shared.txt").write_text("for the group\n")
        (root / "private.json").write_text("{}\n")
        (root / "private.json").chmod(0o600)
        (root / "closed").mkdir(mode=0o700)
        (root / "closed" / "inside.txt").write_text("x\n")
        script = (
            "import json, os, sys\n"
            "from pathlib import Path\n"
            "from hermes_runtime.backup.selection import make_excluder, scan_data_dir\n"
            "os.setgid(10009); os.setuid(10009)\n"
            "found = scan_data_dir(Path(sys.argv[1]), make_excluder((), defaults=False))\n"
            "print(json.dumps({'files': [f.relpath for f in found.files],"
            " 'left_out': found.skipped_special}))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, str(root)], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        assert seen == {"files": ["shared.txt"], "left_out": ["closed", "private.json"]}
        assert '"event": "backup.scan.unreadable", "level": "warning"' in done.stderr
    finally:
        shutil.rmtree(root)

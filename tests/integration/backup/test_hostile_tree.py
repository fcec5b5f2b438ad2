"""``backup create`` reads the agent's data dir as hostile input: real restic, a folder target.

The agent may plant names the backup writes itself, swap folders for links (to a folder
outside, to ``/proc/self``) and put FIFOs and sockets in its tree. The swaps happen at a hook
in create's own path between the scan and the copy (``between_scan_and_copy``), not in a
sleep race. After each backup: nothing was written outside, no byte from outside the data
dir (the backup process's environment above all) is in the snapshot (the whole tree as
``restic dump`` gives it, and restored), and the snapshot restores.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from backup_testlib import BackupTarget, file_target, make_database, rows
from support.restic import TEST_PASSWORD

from hermes_runtime.backup import open_repository, restore_snapshot, safe_tree
from hermes_runtime.backup.manifest import MANIFEST_DIR
from hermes_runtime.backup.restic import restic_binary
from hermes_runtime.common.sqlite import connect

MARKER = f"hermes-env-marker-{secrets.token_hex(8)}"
OUTSIDE = f"hermes-outside-bytes-{secrets.token_hex(8)}"
HOSTILE_CREATE = Path(__file__).with_name("hostile_create.py")


@pytest.fixture(params=["openat2", "step-by-step"])
def resolver(request: pytest.FixtureRequest) -> bool:
    """Both ways of refusing links: the kernel's ``openat2``, and the walk without it."""
    if request.param == "openat2" and not safe_tree.OPENAT2:
        pytest.skip("this kernel has no openat2")
    return request.param == "openat2"


@pytest.fixture
def target(tmp_path: Path) -> BackupTarget:
    return file_target(tmp_path)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the data dir, laid out like the data dir's own folders."""
    folder = tmp_path / "outside"
    (folder / "deep").mkdir(parents=True)
    (folder / "a.txt").write_text(OUTSIDE)
    (folder / "deep" / "b.txt").write_text(OUTSIDE)
    make_database(folder / "inner.db", 5, payload=10)
    conn = connect(folder / "inner.db")
    conn.execute("INSERT INTO messages(body) VALUES (?)", (OUTSIDE,))
    conn.close()
    return folder


@pytest.fixture
def data(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    make_database(d / "state.db", 30)
    make_database(d / "dbs" / "inner.db", 7)
    (d / "notes" / "deep").mkdir(parents=True)
    (d / "notes" / "a.txt").write_text("note a\n")
    (d / "notes" / "deep" / "b.txt").write_text("note b\n")
    (d / "SOUL.md").write_text("soul\n")
    return d


@dataclass
class Backup:
    summary: dict[str, Any]
    ignored: dict[str, str]  # path -> reason of each "backup.scan.ignored" line
    skipped: dict[str, str]  # the same of each "backup.create.skipped" line


def backup(
    target: BackupTarget,
    data: Path,
    tmp_path: Path,
    *,
    openat2: bool = True,
    links: tuple[tuple[str, str], ...] = (),
    fifos: tuple[str, ...] = (),
) -> Backup:
    """``create`` in a process started with the marker in its environment; the agent's moves
    (``links``, ``fifos``) made at its hook between the scan and the copy."""
    spec = {
        "data": str(data), "url": target.url, "work": str(tmp_path / "scratch"),
        "openat2": openat2, "links": links, "fifos": fifos,
    }  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(HOSTILE_CREATE), json.dumps(spec)],
        env={**os.environ, **target.env, "HERMES_BACKUP_TEST_MARKER": MARKER},
        capture_output=True,
        text=True,
        timeout=120,  # a FIFO read would wait forever
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]

    def named(event: str) -> dict[str, str]:
        return {e["path"]: e.get("reason", "") for e in lines if e.get("event") == event}

    return Backup(
        json.loads(done.stdout), named("backup.scan.ignored"), named("backup.create.skipped")
    )


def restored(target: BackupTarget, tmp_path: Path, snapshot: str) -> Path:
    repo = open_repository(target.url, environ={**os.environ, **target.env})
    dest = tmp_path / f"restored-{snapshot[:8]}"
    report = restore_snapshot(repo, dest, snapshot=snapshot)
    assert report.restored, report
    return dest


def dump(target: BackupTarget, snapshot: str) -> bytes:
    """The snapshot's whole tree as one tar, every file's bytes and every link's text."""
    repo = open_repository(target.url, environ={**os.environ, **target.env})
    done = subprocess.run(
        [restic_binary(), "-r", repo.repository, *repo.options, "dump", snapshot, "/"],
        env=repo.env,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def tree_bytes(root: Path) -> bytes:
    """Every regular file's bytes under ``root``, no link followed."""
    blob = b""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if stat.S_ISREG(path.lstat().st_mode):
                blob += path.read_bytes()
    return blob


def assert_nothing_from_outside(target: BackupTarget, tmp_path: Path, snapshot: str) -> Path:
    """No outside bytes and no secret of the backup process in the snapshot; it restores."""
    secrets_of_ours = (MARKER.encode(), TEST_PASSWORD.encode(), OUTSIDE.encode())
    whole = dump(target, snapshot)
    back = restored(target, tmp_path, snapshot)
    blob = tree_bytes(back)
    for secret in secrets_of_ours:
        assert secret not in whole, f"{secret!r} is in snapshot {snapshot}"
        assert secret not in blob, f"{secret!r} is in the restored tree"
    return back


@pytest.mark.parametrize("planted", ["link", "folder"])
def test_a_planted_manifest_folder_is_ignored_and_the_snapshot_restores(
    target: BackupTarget, data: Path, tmp_path: Path, planted: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if planted == "link":
        (data / MANIFEST_DIR).symlink_to(elsewhere)
    else:
        (data / MANIFEST_DIR).mkdir()
        (data / MANIFEST_DIR / "manifest.json").write_text('{"format": 3, "databases": {}}')
    done = backup(target, data, tmp_path)
    assert list(elsewhere.iterdir()) == []  # nothing written outside
    assert MANIFEST_DIR in done.ignored
    back = assert_nothing_from_outside(target, tmp_path, done.summary["id"])
    assert not (back / MANIFEST_DIR).exists() and not (back / MANIFEST_DIR).is_symlink()
    assert rows(back / "state.db", "SELECT count(*) FROM messages") == [(30,)]
    assert (back / "notes" / "deep" / "b.txt").read_text() == "note b\n"


def test_folders_swapped_for_links_out_between_scan_and_copy_are_not_read(
    target: BackupTarget, data: Path, outside: Path, tmp_path: Path, resolver: bool
) -> None:
    links = (("notes", str(outside)), ("dbs", str(outside)))
    done = backup(target, data, tmp_path, openat2=resolver, links=links)
    back = assert_nothing_from_outside(target, tmp_path, done.summary["id"])
    assert sorted(p.name for p in outside.iterdir()) == ["a.txt", "deep", "inner.db"]
    assert {"notes/a.txt", "notes/deep/b.txt", "dbs/inner.db"} <= set(done.skipped)
    assert sorted(done.summary["databases"]) == ["state.db"]
    assert rows(back / "state.db", "SELECT count(*) FROM messages") == [(30,)]
    assert (back / "SOUL.md").read_text() == "soul\n"


def test_links_into_proc_self_never_bring_the_environment_in(
    target: BackupTarget, data: Path, tmp_path: Path, resolver: bool
) -> None:
    (data / "environ").symlink_to("/proc/self/environ")
    (data / "self").symlink_to("/proc/self")
    (data / "notes" / "environ").write_text("the agent's own file\n")
    make_database(data / "dbs" / "environ", 3)
    # folders whose files are named like /proc/self's, swapped for links to it
    links = (("notes", "/proc/self"), ("dbs", "/proc/self"))
    done = backup(target, data, tmp_path, openat2=resolver, links=links)
    back = assert_nothing_from_outside(target, tmp_path, done.summary["id"])
    assert {"notes/environ", "dbs/environ"} <= set(done.skipped)
    assert os.readlink(back / "environ") == "/proc/self/environ"  # stored as a link
    assert os.readlink(back / "self") == "/proc/self"


def test_fifos_and_sockets_are_never_read(
    target: BackupTarget, data: Path, tmp_path: Path, resolver: bool
) -> None:
    os.mkfifo(data / "pipe")  # no writer: reading it would wait forever
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(data / "s.sock"))
    try:  # and a file and a database become FIFOs after the scan
        done = backup(
            target, data, tmp_path, openat2=resolver, fifos=("notes/a.txt", "dbs/inner.db")
        )
    finally:
        sock.close()
    assert sorted(done.summary["skipped"]) == ["dbs/inner.db", "notes/a.txt", "pipe", "s.sock"]
    assert {"notes/a.txt", "dbs/inner.db"} <= set(done.skipped)
    back = assert_nothing_from_outside(target, tmp_path, done.summary["id"])
    assert not (back / "pipe").exists() and not (back / "notes" / "a.txt").exists()
    assert (back / "notes" / "deep" / "b.txt").read_text() == "note b\n"

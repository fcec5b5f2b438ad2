"""A restore trusts no name from the target: crafted snapshots and replicas, real restic and S3.

Whoever can write the backup target decides what a restore reads: anyone holding the
repository password writes snapshots (here: a real backup's tree, changed and backed up again
with restic alone), and anyone who can write the bucket or the volume writes Litestream
replicas (plain files: here real replicas, of a database named to lead through a symlink the
snapshot holds, or newer than the snapshot). The agent's own shell may be either. Each
crafted input must fail the restore naming the bad path and where it came from, write
nothing outside the staging folder, and leave the data dir as it was; and no replica is
read unless ``--replicas`` asks for it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from backup_testlib import (
    BackupTarget,
    Manifest,
    create_json,
    file_target,
    make_database,
    replicating,
    restage,
    rows,
    run_cli,
    tree_fingerprint,
)
from support.wait import wait_until

from hermes_runtime.backup import open_repository, replica_location, restore_snapshot
from hermes_runtime.backup.litestream import restore_replica
from hermes_runtime.common.errors import RuntimeFailure


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    """The folder holding the data dir: a restore stages beside the data dir, in here."""
    folder = tmp_path / "volume"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "notes.md").write_text("what the agent had before the restore\n")
    make_database(folder / "data" / "state.db", 4)
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def source_dir(tmp_path: Path) -> Path:
    """What the backups are taken of: a database and a file."""
    data = tmp_path / "source"
    make_database(data / "state.db", 20)
    (data / "SOUL.md").write_text("soul\n")
    return data


def forced_restore(
    target: BackupTarget, data: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "restore", "--target", target.url, "--data-dir", str(data), "--force", *extra,
        env=target.env,
    )  # fmt: skip


def assert_refused(
    done: subprocess.CompletedProcess[str],
    volume: Path,
    before: dict[str, str],
    outside: Path,
    *named: str,
) -> None:
    """Exit 1 naming ``named``; nothing beside the data dir or in ``outside``; data unchanged."""
    assert done.returncode == 1, done.stdout + done.stderr
    for text in (*named, "unsafe path", "is unchanged"):
        assert text in done.stderr, (text, done.stderr)
    assert sorted(os.listdir(volume)) == ["data"]  # the staging folder is gone, nothing else
    assert list(outside.iterdir()) == []
    assert tree_fingerprint(volume / "data", skip_databases=False) == before


def rename_database(key: str) -> Callable[[Path, Manifest], None]:
    """A change for ``restage``: the manifest calls state.db's record database ``key``."""

    def change(tree: Path, manifest: Manifest) -> None:
        manifest["databases"][key] = manifest["databases"].pop("state.db")

    return change


@pytest.mark.parametrize("key", ["../escaped.db", "sub/../../escaped.db", "{outside}/abs.db"])
def test_a_manifest_key_leading_out_of_the_stage_fails_the_restore(
    key: str, tmp_path: Path, volume: Path, outside: Path
) -> None:
    key = key.format(outside=outside)
    target = file_target(tmp_path)
    create_json(target, source_dir(tmp_path))
    crafted = restage(target, tmp_path / "craft", rename_database(key))
    before = tree_fingerprint(volume / "data", skip_databases=False)

    done = forced_restore(target, volume / "data")

    assert_refused(done, volume, before, outside, repr(key), "manifest", crafted)
    assert not list(tmp_path.rglob("escaped.db*"))


def test_a_database_written_through_a_symlink_member_of_the_snapshot_fails(
    target: BackupTarget, tmp_path: Path, volume: Path, outside: Path
) -> None:
    """The snapshot holds ``link -> <outside>`` (restic restores it as it is: it is data) and
    its manifest puts state.db at ``link/state.db``: through the link, outside the stage."""
    create_json(target, source_dir(tmp_path))

    def link_out(tree: Path, manifest: Manifest) -> None:
        (tree / "link").symlink_to(outside)
        manifest["databases"]["link/state.db"] = manifest["databases"].pop("state.db")

    crafted = restage(target, tmp_path / "craft", link_out)
    before = tree_fingerprint(volume / "data", skip_databases=False)

    done = forced_restore(target, volume / "data")

    assert_refused(done, volume, before, outside, "'link/state.db'", "manifest", crafted)
    assert f"leads to {outside}/state.db" in done.stderr


def replica_rows(target: BackupTarget, relpath: str, scratch: Path) -> int:
    """The rows of ``messages`` a restore of one replica gives right now (0: nothing yet)."""
    location = replica_location(target.url, environ={**os.environ, **target.env})
    scratch.mkdir(exist_ok=True)
    dest = scratch / f"probe-{os.urandom(4).hex()}.db"
    try:
        restore_replica(location, relpath, dest)
        return int(rows(dest, "SELECT count(*) FROM messages")[0][0])  # type: ignore[call-overload]
    except RuntimeFailure:
        return 0
    finally:
        for path in scratch.glob(f"{dest.name}*"):
            path.unlink()


def replicate_until(target: BackupTarget, data: Path, relpath: str, count: int) -> None:
    """``backup replicate`` of ``data`` until ``relpath``'s replica holds ``count`` rows."""
    work = data.parent / f"replicate-{data.name}"
    work.mkdir()
    with replicating(target, data, work / "replicate.log"):
        wait_until(
            lambda: replica_rows(target, relpath, work / "probe") == count,
            90,
            f"{count} rows in the replica of {relpath}",
            interval=1.0,
        )


def restore_report(target: BackupTarget, data: Path, *extra: str) -> dict[str, Any]:
    done = run_cli(
        "restore", "--target", target.url, "--data-dir", str(data), "--json", *extra,
        env=target.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_a_newer_replica_is_read_only_with_replicas(target: BackupTarget, tmp_path: Path) -> None:
    """The replica's LTX headers say it is newer than the snapshot (it is: 15 more rows), and
    without ``--replicas`` the snapshot's copy comes back all the same."""
    data = source_dir(tmp_path)
    backup = create_json(target, data)
    make_database(data / "state.db", 15)
    replicate_until(target, data, "state.db", 35)

    report = restore_report(target, tmp_path / "restored")
    assert report["sources"]["state.db"]["source"] == "restic"
    assert report["sources"]["state.db"]["ref"] == backup["id"]
    assert rows(tmp_path / "restored" / "state.db", "SELECT count(*) FROM messages") == [(20,)]

    # Asked for, the replica is taken: it was there, and newer, all along.
    asked = restore_report(target, tmp_path / "asked", "--replicas", f"{target.url}/litestream")
    assert asked["sources"]["state.db"]["source"] == "litestream"
    assert rows(tmp_path / "asked" / "state.db", "SELECT count(*) FROM messages") == [(35,)]


def assert_replica_refused(
    raised: pytest.ExceptionInfo[RuntimeFailure],
    volume: Path,
    before: dict[str, str],
    outside: Path,
    *named: str,
) -> None:
    message = str(raised.value)
    for text in (*named, "unsafe path", "is unchanged"):
        assert text in message, (text, message)
    assert sorted(os.listdir(volume)) == ["data"]
    assert list(outside.iterdir()) == []
    assert tree_fingerprint(volume / "data", skip_databases=False) == before


def restore_with_replicas(target: BackupTarget, data: Path) -> None:
    """The library call ``backup restore --replicas <target>/litestream --force`` makes."""
    env = {**os.environ, **target.env}
    restore_snapshot(
        open_repository(target.url, environ=env),
        data,
        force=True,
        replicas=replica_location(target.url, environ=env),
    )


def test_a_replica_put_through_a_symlink_member_of_the_snapshot_fails(
    target: BackupTarget, tmp_path: Path, volume: Path, outside: Path
) -> None:
    """The latest snapshot holds ``link -> <outside>`` (crafted with restic: restic restores a
    symlink as it is, it is data); the target holds a real replica of a database
    ``link/state.db`` (made by replicating a folder of that shape, as anyone who can write the
    target can). Its keys are plain, but the path they give goes through the snapshot's link.
    Keys with ``..`` or absolute parts cannot be stored in a folder, and SeaweedFS refuses or
    folds them too (AWS S3 keeps them): tests/unit/backup/test_untrusted_names.py."""
    create_json(target, source_dir(tmp_path))
    restage(target, tmp_path / "craft", lambda tree, manifest: (tree / "link").symlink_to(outside))
    other = tmp_path / "other"
    make_database(other / "link" / "state.db", 5)
    replicate_until(target, other, "link/state.db", 5)
    before = tree_fingerprint(volume / "data", skip_databases=False)

    with pytest.raises(RuntimeFailure) as raised:
        restore_with_replicas(target, volume / "data")

    replica = replica_location(target.url, environ={}).agent_url() + "/link/state.db"
    assert_replica_refused(raised, volume, before, outside, f"Litestream replica {replica}")
    assert f"unsafe path 'link/state.db': it leads to {outside}/state.db" in str(raised.value)

    # Without --replicas no replica is read: the snapshot comes back, its link as data.
    report = restore_report(target, volume / "data", "--force")
    assert {path: source["source"] for path, source in report["sources"].items()} == {
        "state.db": "restic"
    }
    assert os.readlink(volume / "data" / "link") == str(outside)
    assert list(outside.iterdir()) == []

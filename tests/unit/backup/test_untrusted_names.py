"""Names from the backup target are joined onto a folder only when they stay inside it.

The rule (``hermes_runtime.backup.untrusted``) and each place that applies it without a
server: the keys of a replica listing (AWS S3 keeps ``..``
and empty parts in a key; SeaweedFS refuses or folds them, a folder cannot hold them, so the
keys are given here as AWS would list them), a replica's database put into the staging
folder, and the ``--replicas`` URL. Real restic snapshots, replicas on a folder and on SeaweedFS:
tests/integration/backup/test_untrusted_inputs.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermes_runtime.backup import replicas_location
from hermes_runtime.backup.litestream import ReplicaPlan
from hermes_runtime.backup.replica_order import ltx_files, restore_replicas
from hermes_runtime.backup.untrusted import UnsafePath, checked_name, inside
from hermes_runtime.cli import main

SOURCE = "manifest of snapshot 1234abcd"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "is empty"),
        ("../x.db", "has a '..' part"),
        ("a/../../x.db", "has a '..' part"),
        ("..", "has a '..' part"),
        ("/etc/x.db", "is absolute"),
        ("a//x.db", "has an empty part"),
        ("a/x.db/", "has an empty part"),
        ("./x.db", "has a '.' part"),
        ("x\0.db", "holds a NUL byte"),
    ],
)
def test_a_name_that_is_not_plain_is_refused_naming_it_and_its_source(name: str, why: str) -> None:
    with pytest.raises(UnsafePath) as raised:
        checked_name(name, SOURCE)
    assert str(raised.value) == f"{SOURCE}: unsafe path {name!r}: it {why}"


@pytest.mark.parametrize("name", ["x.db", "sub/x.db", ".hermes-backup/x.db", "..x", "a..b"])
def test_plain_names_pass(name: str, tmp_path: Path) -> None:
    assert checked_name(name, SOURCE) == name
    assert inside(tmp_path, name, SOURCE) == tmp_path / name


def test_a_name_through_a_symlink_pointing_out_is_refused(tmp_path: Path) -> None:
    stage, outside = tmp_path / "stage", tmp_path / "outside"
    (stage / "real").mkdir(parents=True)
    outside.mkdir()
    (stage / "out").symlink_to(outside)
    (stage / "up").symlink_to("..")
    (stage / "loop").symlink_to("loop")
    (stage / "back").symlink_to("real")  # stays inside: fine
    assert inside(stage, "back/x.db", SOURCE) == stage / "back" / "x.db"
    for name in ("out/x.db", "up/outside/x.db", "out", "up"):
        with pytest.raises(UnsafePath, match=f"{SOURCE}: unsafe path '{name}': it leads to"):
            inside(stage, name, SOURCE)
    assert inside(stage, "loop/x.db", SOURCE)  # a loop resolves to nowhere outside; open fails


LTX = "0000/0000000000000001-0000000000000001.ltx"
ROOT_URL = "s3://bkp/agent/litestream"


@pytest.mark.parametrize(
    ("database", "why"),
    [
        ("../../escaped.db", "has a '..' part"),
        ("sub/../../escaped.db", "has a '..' part"),
        ("/tmp/escaped.db", "is absolute"),  # litestream//tmp/... in the bucket
        ("sub//escaped.db", "has an empty part"),
        ("./escaped.db", "has a '.' part"),
    ],
)
def test_a_replica_key_leading_out_is_refused_naming_it(database: str, why: str) -> None:
    key = f"{database}/{LTX}"
    with pytest.raises(UnsafePath) as raised:
        ltx_files(["state.db/" + LTX, key], ROOT_URL)
    assert str(raised.value) == (
        f"Litestream replica key {ROOT_URL}/{key}: unsafe path {key!r}: it {why}"
    )


def test_plain_replica_keys_group_by_database_and_other_keys_are_skipped() -> None:
    keys = ["state.db/" + LTX, "sub/lcm.db/" + LTX, "state.db/", "../notes.txt", "sub/"]
    files = ltx_files(keys, ROOT_URL)
    assert {db: [f.key for f in found] for db, found in files.items()} == {
        "state.db": ["state.db/" + LTX],
        "sub/lcm.db": ["sub/lcm.db/" + LTX],
    }


def test_a_replica_is_never_put_through_a_symlink_of_the_stage(tmp_path: Path) -> None:
    """The key is plain, but the snapshot restored ``link`` as a symlink pointing out."""
    stage, outside = tmp_path / "stage", tmp_path / "outside"
    stage.mkdir()
    outside.mkdir()
    (stage / "link").symlink_to(outside)
    location = replicas_location(f"file://{tmp_path}/backup/litestream", environ={})
    url = location.replica_url("link/state.db")
    plan = ReplicaPlan("link/state.db", url, f"{1:016x}")
    with pytest.raises(UnsafePath, match=f"Litestream replica {url}: unsafe path 'link/state.db'"):
        restore_replicas(location, [plan], stage)
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize(
    ("url", "root"),
    [
        ("file:///backup/litestream", "/backup/litestream/hermes-runtime/"),
        # $(TARGET)/litestream, TARGET ends in /
        ("file:///backup//litestream/", "/backup/litestream/hermes-runtime/"),
        ("s3://bkp/agent/litestream", "agent/litestream/hermes-runtime/"),
        ("s3://bkp/litestream", "litestream/hermes-runtime/"),
    ],
)
def test_replicas_are_named_by_where_backup_replicate_writes_them(url: str, root: str) -> None:
    location = replicas_location(url, environ={})
    assert location.replicas_root() == root
    assert location.url == url.replace("//litestream/", "/litestream")
    assert location.replica_path("lcm.db").endswith("litestream/hermes-runtime/lcm.db")


@pytest.mark.parametrize(
    "url",
    [
        "file:///backup",  # the target itself, not its replicas
        "s3://bkp/agent",
        "s3://bkp/agent/litestream?region=x",
        "file://host/backup/litestream",
        "ftp://bkp/litestream",
        "litestream",
    ],
)
def test_other_replica_urls_are_a_usage_error_naming_them(
    url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["backup", "restore", "--target", f"file://{tmp_path}", "--data-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--replicas", url])
    assert exited.value.code == 2
    assert f"--replicas {url}: expected file:///path/litestream" in capsys.readouterr().err


def test_replicas_go_with_the_latest_snapshot_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["backup", "restore", "--target", f"file://{tmp_path}", "--data-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--snapshot", "3fa2c1d4", "--replicas", f"file://{tmp_path}/litestream"])
    assert exited.value.code == 2
    assert "--replicas goes with --snapshot latest" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == []

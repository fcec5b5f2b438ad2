"""Create, list, verify, restore through the CLI, against a folder and a real S3 server."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from backup_testlib import BackupTarget, make_database, rows, run_cli, tree_fingerprint
from backup_testlib import create_json as create
from prometheus_client.parser import text_string_to_metric_families


def with_group_access(fingerprint: dict[str, str]) -> dict[str, str]:
    """What restore leaves for the agent, another UID of the pod: each file's mode with the
    group's read and write added, each folder's with read, write and search; links as they
    were (``common/groupaccess.py``)."""
    shared = {}
    for relpath, value in fingerprint.items():
        head, _, mode = value.rpartition(":")
        if value.startswith("link:"):
            shared[relpath] = value
        else:
            bits = 0o070 if head == "dir" else 0o060
            shared[relpath] = f"{head}:{int(mode, 8) | bits:o}"
    return shared


def test_restore_gives_back_the_data_dir_without_secrets_or_rebuildables(
    target: BackupTarget, data_dir: Path, tmp_path: Path
) -> None:
    summary = create(target, data_dir)
    assert summary["databases"] == {"lcm.db": {"messages": 300}, "state.db": {"messages": 500}}
    listed = run_cli("list", "--target", target.url, "--json", env=target.env)
    assert [
        (s["id"], s["databases"], s["files"], s["status"]) for s in json.loads(listed.stdout)
    ] == [(summary["id"], 2, summary["files"] + 2, "ok")], "our manifest is not counted as a file"

    verified = run_cli("verify", "--target", target.url, env=target.env)
    assert verified.returncode == 0, verified.stderr
    assert summary["id"] in verified.stdout

    restored = tmp_path / "restored"
    previous = os.umask(0o077)  # restore sets its own: the agent (another UID) writes after it
    try:
        result = run_cli(
            "restore",
            "--target",
            target.url,
            "--snapshot",
            summary["id"],
            "--data-dir",
            str(restored),
            env=target.env,
        )
    finally:
        os.umask(previous)
    assert result.returncode == 0, result.stderr
    expected = {
        k: v
        for k, v in tree_fingerprint(data_dir).items()
        if not k.startswith((".git-sync", "cache")) and k not in (".env", "auth.json")
    }
    assert tree_fingerprint(restored) == with_group_access(expected)
    assert stat.S_IMODE(restored.stat().st_mode) & 0o070 == 0o070
    assert rows(restored / "state.db", "SELECT count(*) FROM messages") == [(500,)]
    assert rows(restored / "lcm.db", "PRAGMA integrity_check") == [("ok",)]
    everything = b"".join(target.read(k) for k in target.object_keys())
    assert b"sk-live-secret" not in everything and b"oauth-secret" not in everything


def test_unchanged_files_are_not_read_again_and_add_almost_nothing(
    target: BackupTarget, data_dir: Path
) -> None:
    first = create(target, data_dir)
    unchanged = create(target, data_dir)
    assert unchanged["bytes_uploaded"] <= 1_000_000  # issue 15's goal for an unchanged data dir
    make_database(data_dir / "state.db", 1)  # the database changes, the files do not
    second = create(target, data_dir)
    assert second["files_unchanged"] >= first["files"]
    assert second["databases"]["state.db"] == {"messages": 501}


def test_restore_refuses_a_non_empty_dir_and_leaves_it_untouched(
    target: BackupTarget, data_dir: Path, tmp_path: Path
) -> None:
    create(target, data_dir)
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("precious")
    (occupied / "lost+found").mkdir()
    before = tree_fingerprint(occupied, skip_databases=False)

    refused = run_cli(
        "restore", "--target", target.url, "--data-dir", str(occupied), env=target.env
    )
    assert refused.returncode == 1
    assert str(occupied) in refused.stderr and "--force" in refused.stderr
    skipped = run_cli(
        "restore",
        "--target",
        target.url,
        "--data-dir",
        str(occupied),
        "--if-empty",
        env=target.env,
    )
    assert skipped.returncode == 0, skipped.stderr
    assert tree_fingerprint(occupied, skip_databases=False) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".hermes")) == []

    forced = run_cli(
        "restore", "--target", target.url, "--data-dir", str(occupied), "--force", env=target.env
    )
    assert forced.returncode == 0, forced.stderr
    assert not (occupied / "keep.txt").exists()
    assert (occupied / "lost+found").is_dir()
    assert (occupied / "SOUL.md").read_text() == "You are a careful agent.\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".hermes")) == []


def test_if_empty_restores_into_a_dir_holding_only_lost_and_found(
    target: BackupTarget, data_dir: Path, tmp_path: Path
) -> None:
    create(target, data_dir)
    fresh = tmp_path / "fresh-pvc"
    (fresh / "lost+found").mkdir(parents=True)
    result = run_cli(
        "restore",
        "--target",
        target.url,
        "--snapshot",
        "latest",
        "--data-dir",
        str(fresh),
        "--if-empty",
        "--json",
        env=target.env,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["restored"] is True
    assert (fresh / "memories" / "MEMORY.md").read_text() == "- the user likes tea\n"


def test_metrics_file_keeps_last_success_across_a_failure(
    target: BackupTarget, data_dir: Path, tmp_path: Path
) -> None:
    metrics = tmp_path / "metrics" / "backup.prom"
    summary = create(target, data_dir, "--metrics-file", str(metrics))

    def values() -> dict[str, float]:
        families = text_string_to_metric_families(metrics.read_text())
        return {s.name: s.value for f in families for s in f.samples}

    ok = values()
    assert ok["hermes_backup_last_run_success"] == 1
    assert ok["hermes_backup_bytes_uploaded"] == summary["bytes_uploaded"]
    failed = run_cli(
        "create",
        "--data-dir",
        str(tmp_path / "missing"),
        "--target",
        target.url,
        "--metrics-file",
        str(metrics),
        env=target.env,
    )
    assert failed.returncode == 1
    assert "missing" in failed.stderr
    after = values()
    assert after["hermes_backup_last_run_success"] == 0
    assert (
        after["hermes_backup_last_success_timestamp_seconds"]
        == (ok["hermes_backup_last_success_timestamp_seconds"])
    )

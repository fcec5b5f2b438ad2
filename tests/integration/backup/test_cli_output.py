"""What the backup commands print says only what happened (issue 29, point 6).

``verify`` used to end every success with "verified mark not written" (restic keeps no marks,
and the report's ``marked`` was always false); ``prune`` printed "0 blob(s), 0 bytes", figures
restic's ``forget --json`` never gives; ``list`` had a ``verified`` mark that nothing set; and
``--no-mark`` had come to mean "without restic's lock". Each is checked against a real
repository here.
"""

from __future__ import annotations

import json
from pathlib import Path

from backup_testlib import create_json, file_target, run_cli


def test_verify_says_what_it_checked_and_nothing_about_marks(
    data_dir: Path, tmp_path: Path
) -> None:
    target = file_target(tmp_path)
    snapshot = create_json(target, data_dir)["id"]
    text = run_cli("verify", "--target", target.url, env=target.env)
    assert text.returncode == 0, text.stderr
    assert "mark" not in text.stdout, text.stdout
    assert text.stdout.startswith(f"snapshot {snapshot}: ok: restic read back every pack; ")
    assert "2 databases restored to scratch" in text.stdout
    assert "matched its recorded SHA-256 and passed integrity_check" in text.stdout
    report = json.loads(run_cli("verify", "--target", target.url, "--json").stdout)
    assert "marked" not in report and report["locked"] is True, report
    listed = json.loads(run_cli("list", "--target", target.url, "--json").stdout)
    assert [sorted(info) for info in listed] == [
        ["agent", "bytes", "created_at", "databases", "files", "id", "labels", "status"]
    ], "no `verified` field: nothing ever set it"


def test_verify_no_mark_is_a_usage_error_naming_no_lock(tmp_path: Path) -> None:
    """Nothing is contacted: the target does not even exist."""
    result = run_cli("verify", "--target", f"file://{tmp_path}/none", "--no-mark")
    assert result.returncode == 2, result.stderr
    assert "--no-mark is gone" in result.stderr and "--no-lock" in result.stderr
    assert "Traceback" not in result.stderr


def test_prune_reports_only_what_restic_says(data_dir: Path, tmp_path: Path) -> None:
    target = file_target(tmp_path)
    create_json(target, data_dir)
    (data_dir / "SOUL.md").write_text("changed\n")
    create_json(target, data_dir)
    dry = run_cli("prune", "--target", target.url, "--keep-last", "1", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == "kept 1 snapshot(s), would delete 1\n"
    pruned = run_cli("prune", "--target", target.url, "--keep-last", "1", "--json")
    assert pruned.returncode == 0, pruned.stderr
    assert sorted(json.loads(pruned.stdout)) == ["deleted", "dry_run", "kept"]


def test_labels_are_kept_with_the_snapshot_and_listed(data_dir: Path, tmp_path: Path) -> None:
    """The chart's pre-upgrade backup labels its snapshot so the rollback runbook finds it."""
    target = file_target(tmp_path)
    plain = create_json(target, data_dir)["id"]
    labelled = create_json(target, data_dir, "--label", "pre-upgrade=revision 4 to 0.2.0")["id"]
    listed = {
        i["id"]: i for i in json.loads(run_cli("list", "--target", target.url, "--json").stdout)
    }
    assert listed[plain]["labels"] == {}
    assert listed[labelled]["labels"] == {"pre-upgrade": "revision 4 to 0.2.0"}
    text = run_cli("list", "--target", target.url).stdout
    (line,) = [row for row in text.splitlines() if row.startswith(labelled)]
    assert line.endswith("ok  pre-upgrade=revision 4 to 0.2.0"), line


def test_a_bad_label_is_refused_before_anything_is_written(data_dir: Path, tmp_path: Path) -> None:
    target = file_target(tmp_path)
    for label, message in (
        ("Pre-Upgrade=x", "the key must be lower-case"),
        ("pre-upgrade=a,b", "without ','"),
    ):
        done = run_cli(
            "create",
            "--data-dir",
            str(data_dir),
            "--target",
            target.url,
            "--label",
            label,
            env=target.env,
        )
        assert done.returncode == 1 and message in done.stderr, done.stderr
    usage = run_cli("create", "--data-dir", str(data_dir), "--target", target.url, "--label", "x")
    assert usage.returncode == 2 and "is not KEY=VALUE" in usage.stderr
    assert json.loads(run_cli("list", "--target", target.url, "--json").stdout) == []

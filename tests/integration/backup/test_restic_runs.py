"""restic specifics: the password is required, and the repository is readable by restic alone."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from backup_testlib import BackupTarget, make_database, rows

from hermes_runtime.backup import create_backup, list_snapshots, restore, restore_snapshot
from hermes_runtime.backup.manifest import MANIFEST_DIR
from hermes_runtime.backup.restic import open_repository, restic_binary
from hermes_runtime.common.errors import RuntimeFailure

PASSWORD = {"RESTIC_PASSWORD": "correct horse battery staple"}
REPO = Path(__file__).resolve().parents[3]
SUBCOMMANDS = {
    "backup",
    "init",
    "cat",
    "snapshots",
    "forget",
    "restore",
}  # the restic runs counted


def test_missing_password_is_a_clear_error(target: BackupTarget) -> None:
    environ = {k: v for k, v in {**os.environ, **target.env}.items() if "RESTIC" not in k}
    with pytest.raises(RuntimeFailure, match="RESTIC_PASSWORD"):
        open_repository(target.url, environ=environ)
    result = subprocess.run(
        [sys.executable, "-m", "hermes_runtime", "backup", "list", "--target", target.url],
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert target.url in result.stderr and "RESTIC_PASSWORD_FILE" in result.stderr
    assert "Traceback" not in result.stderr


def restic_alone_block() -> str:
    """The commands of docs/backup.md's "Restoring with restic alone", as a reader pastes them."""
    text = (REPO / "docs" / "backup.md").read_text()
    start = text.index("## Restoring with restic alone")
    (block,) = re.findall(r"```sh\n(.*?)```", text[start : text.index("\n## ", start + 1)], re.S)
    return str(block)


def test_plain_restic_restores_the_data_dir(data_dir: Path, tmp_path: Path) -> None:
    """The runbook's way without our CLI: `restic restore`, then remove our manifest."""
    root = tmp_path / "repo"
    root.mkdir()
    repo = open_repository(f"file://{root}", environ={**os.environ, **PASSWORD})
    make_database(data_dir / "sessions" / "big.db", 12_000, payload=300)  # nested
    created = create_backup(data_dir, repo, work_dir=tmp_path)
    out = tmp_path / "plain"
    block = restic_alone_block().replace("/backup", str(root)).replace("/restore", str(out))
    block = block.replace("export RESTIC_PASSWORD=...", ":")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "restic").symlink_to(restic_binary())
    env = {**os.environ, **PASSWORD, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + block], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (out / "memories" / "MEMORY.md").read_text() == "- the user likes tea\n"
    dump = [restic_binary(), "-r", str(root), "dump", "latest", "/.hermes-backup/manifest.json"]
    manifest = json.loads(subprocess.run(dump, env=env, capture_output=True, check=True).stdout)
    for path, tables in created.databases.items():
        # The docs' promise: `sha256sum` of a restored database prints the manifest's `sha256`.
        digest = hashlib.sha256((out / path).read_bytes()).hexdigest()
        assert digest == manifest["databases"][path]["sha256"], path
        assert rows(out / path, "PRAGMA integrity_check") == [("ok",)], path
        assert rows(out / path, "SELECT count(*) FROM messages") == [(tables["messages"],)]
    assert not (out / MANIFEST_DIR).exists()


def test_a_create_runs_restic_once_and_a_first_one_creates_the_repository_quietly(
    target: BackupTarget, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No probe of the repository before a backup: every restic run derives the key (0.5 s of
    CPU), so once the repository exists a create runs restic once. The first create's
    ``restic backup`` finds no repository: ``init``, then the backup again, and restic's words
    about the missing repository are not relayed as if something were wrong."""
    calls = tmp_path / "restic-calls"
    wrapper = tmp_path / "restic-wrapper"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec {restic_binary()} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("HERMES_RUNTIME_RESTIC", str(wrapper))
    repo = open_repository(target.url, environ={**os.environ, **target.env})

    def created() -> tuple[list[str], str]:
        calls.unlink(missing_ok=True)
        events = io.StringIO()
        create_backup(data_dir, repo, work_dir=tmp_path, stream=events)
        words = [line.split() for line in calls.read_text().splitlines()]
        return [next(w for w in argv if w in SUBCOMMANDS) for argv in words], events.getvalue()

    first, log = created()
    assert first == ["backup", "init", "backup"]
    assert "does not exist" not in log and "Is there a repository" not in log
    assert '"event": "backup.create.finished"' in log
    again, _ = created()
    assert again == ["backup"]
    assert [s.id for s in list_snapshots(repo)] != []


def pinning_restic(tmp_path: Path, calls: Path, pin: Path) -> Path:
    """A restic that logs each run's arguments to ``calls`` and, once ``pin`` holds a snapshot
    id, reads that snapshot wherever it is asked for ``latest``."""
    wrapper = tmp_path / "restic-wrapper"
    wrapper.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        f"pin = open({str(pin)!r}).read().strip() if os.path.exists({str(pin)!r}) else ''\n"
        "args = [pin if pin and a == 'latest' else a for a in sys.argv[1:]]\n"
        f"open({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        f"os.execv({restic_binary()!r}, [{restic_binary()!r}, *args])\n"
    )
    wrapper.chmod(0o755)
    return wrapper


def test_a_restore_of_latest_lists_beside_it_and_never_mixes_in_a_backup_landing_meanwhile(
    target: BackupTarget,
    data_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``restore --snapshot latest`` starts restic's restore of ``latest`` beside the listing
    (each run derives the key first, ~0.7 s of CPU). The tree counts only if its manifest
    carries the backup id tagged on the snapshot the listing calls latest. Here the restore is
    pinned to the older snapshot, as if it resolved ``latest`` just before a backup landed: the
    restore must bring back the listed snapshot whole, by its id."""
    repo = open_repository(target.url, environ={**os.environ, **target.env})
    older = create_backup(data_dir, repo, work_dir=tmp_path)
    make_database(data_dir / "lcm.db", 40)  # 40 more rows
    (data_dir / "SOUL.md").write_text("You are a newer agent.\n")
    newer = create_backup(data_dir, repo, work_dir=tmp_path)
    expected = rows(data_dir / "lcm.db", "SELECT count(*) FROM messages")
    calls, pin = tmp_path / "restic-calls", tmp_path / "pinned-latest"
    monkeypatch.setenv("HERMES_RUNTIME_RESTIC", str(pinning_restic(tmp_path, calls, pin)))

    def restored(name: str) -> tuple[list[list[str]], str]:
        calls.unlink(missing_ok=True)
        capsys.readouterr()
        report = restore_snapshot(repo, tmp_path / name)
        assert report.snapshot == newer.id
        assert rows(tmp_path / name / "lcm.db", "SELECT count(*) FROM messages") == expected
        assert (tmp_path / name / "SOUL.md").read_text() == "You are a newer agent.\n"
        runs = []
        for line in calls.read_text().splitlines():
            argv = line.split()
            command = next(w for w in argv if w in SUBCOMMANDS)
            runs.append([command, *(w for w in argv if w in {"latest", newer.id})])
        return runs, capsys.readouterr().err

    runs, log = restored("unpinned")
    assert sorted(runs) == [["restore", "latest"], ["snapshots"]]
    assert "backup.restore.by_id" not in log
    pin.write_text(older.id)
    runs, log = restored("pinned")
    assert sorted(runs[:2]) == [["restore", "latest"], ["snapshots"]]
    assert runs[2:] == [["restore", newer.id]]
    assert '"event": "backup.restore.by_id"' in log and "not the listed latest" in log


def test_a_restore_of_latest_that_cannot_empty_its_first_tree_fails_and_changes_nothing(
    target: BackupTarget, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the tree restored beside the listing is not the listed snapshot's, it is removed
    before the listed one is restored into the same staging folder; if it cannot be removed
    (here ``rmtree`` fails), the restore stops: never a tree with files of both snapshots."""
    repo = open_repository(target.url, environ={**os.environ, **target.env})
    older = create_backup(data_dir, repo, work_dir=tmp_path)
    (data_dir / "SOUL.md").write_text("You are a newer agent.\n")
    create_backup(data_dir, repo, work_dir=tmp_path)
    pin = tmp_path / "pinned-latest"
    pin.write_text(older.id)
    wrapper = pinning_restic(tmp_path, tmp_path / "restic-calls", pin)
    monkeypatch.setenv("HERMES_RUNTIME_RESTIC", str(wrapper))
    real_rmtree = restore.shutil.rmtree

    def stuck(path: Path, ignore_errors: bool = False, **kwargs: Any) -> None:
        """The staging folder itself cannot be removed; everything else can."""
        if Path(path).name.endswith("-stage") and not ignore_errors:
            raise PermissionError(13, "Permission denied", str(path))
        real_rmtree(path, ignore_errors=ignore_errors, **kwargs)

    monkeypatch.setattr(restore.shutil, "rmtree", stuck)
    restored = tmp_path / "restored"
    with pytest.raises(
        RuntimeFailure, match=r"cannot empty the staging folder .*Permission denied"
    ):
        restore_snapshot(repo, restored)
    assert not restored.exists()
    assert not list(tmp_path.glob(".hermes-restore-*"))

"""restic v0.19's exit statuses, each met with the real binary and said in one clear line.

- 3 from ``backup``: restic saved a snapshot without every file it was given (since 0.19 also
  for a source that does not exist). ``create`` removes that snapshot and fails saying so.
- 3 from ``forget``: a snapshot could not be removed (it used to exit 0). ``prune`` fails
  naming it; restic pruned nothing.
- 130: SIGINT (it used to be 1). The command fails saying it was interrupted.
- 1 for an environment variable restic cannot parse (``RESTIC_COMPRESSION``,
  ``RESTIC_PACK_SIZE``, ``RESTIC_READ_CONCURRENCY``; they used to be ignored): the failure
  names the variable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from backup_testlib import BackupTarget, create_json, file_target, run_cli
from support.restic import RESTIC_VERSION

from hermes_runtime.backup.restic import restic_binary


def test_the_tests_run_the_pinned_restic() -> None:
    done = subprocess.run([restic_binary(), "version"], capture_output=True, text=True)
    assert done.stdout.startswith(f"restic {RESTIC_VERSION[1:]} "), done.stdout


def listed_ids(target: BackupTarget) -> list[str]:
    listing = run_cli("list", "--target", target.url, "--json", env=target.env)
    assert listing.returncode == 0, listing.stderr
    return [s["id"] for s in json.loads(listing.stdout)]


def test_a_snapshot_restic_saved_without_every_file_is_removed(
    target: BackupTarget, data_dir: Path, tmp_path: Path
) -> None:
    """restic itself, given one more source that does not exist (as a stage file gone
    unreadable would be): it saves a snapshot and exits 3."""
    missing = tmp_path / "gone"
    wrapper = tmp_path / "restic-wrapper"
    wrapper.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        f"extra = [{str(missing)!r}] if 'backup' in sys.argv else []\n"
        f"os.execv({restic_binary()!r}, [{restic_binary()!r}, *sys.argv[1:], *extra])\n"
    )
    wrapper.chmod(0o755)
    scratch = tmp_path / "scratch"
    created = run_cli(
        "create", "--data-dir", str(data_dir), "--target", target.url,
        "--work-dir", str(scratch),
        env={**target.env, "HERMES_RUNTIME_RESTIC": str(wrapper)},
    )  # fmt: skip
    assert created.returncode == 1, created.stderr
    assert "could not read every file it was given (exit 3)" in created.stderr
    assert f"{missing} does not exist, skipping" in created.stderr
    assert "its incomplete snapshot" in created.stderr and "was removed" in created.stderr
    assert listed_ids(target) == [], "no snapshot without every file stands"
    assert not list(scratch.glob("hermes-restic-stage")), "the stage is gone"


def test_a_prune_that_cannot_remove_a_snapshot_fails_naming_it(
    data_dir: Path, tmp_path: Path
) -> None:
    """The older snapshot's file cannot be deleted (immutable as root, as in CI; its folder
    mode 0555 otherwise): restic's forget cannot remove it. A permission error, which restic
    does not retry (a read-only mount it would retry for 15 minutes)."""
    target = file_target(tmp_path)
    older = create_json(target, data_dir)["id"]
    (data_dir / "SOUL.md").write_text("changed\n")
    newer = create_json(target, data_dir)["id"]
    assert target.root is not None
    snapshots = target.root / "snapshots"
    pinned = snapshots / older
    as_root = os.geteuid() == 0
    if as_root:
        subprocess.run(["chattr", "+i", str(pinned)], check=True)
    else:
        snapshots.chmod(0o555)
    try:
        pruned = run_cli("prune", "--target", target.url, "--keep-last", "1")
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", str(pinned)], check=True)
        snapshots.chmod(0o700)
    assert pruned.returncode == 1, pruned.stdout + pruned.stderr
    assert f"restic forget on {target.url} could not remove {older[:8]}" in pruned.stderr, (
        pruned.stderr
    )
    assert "(exit 3); nothing was pruned" in pruned.stderr
    assert listed_ids(target) == [older, newer]


def test_restic_interrupted_by_sigint_is_said_so(
    target: BackupTarget, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The password command sends SIGINT to the restic that runs it: restic stops, exit 130."""
    create_json(target, data_dir)
    monkeypatch.delenv("RESTIC_PASSWORD")
    env = {k: v for k, v in target.env.items() if k != "RESTIC_PASSWORD"}
    env["RESTIC_PASSWORD_COMMAND"] = 'sh -c "kill -INT $PPID; sleep 1; echo unused"'
    listed = run_cli("list", "--target", target.url, env=env)
    assert listed.returncode == 1
    assert f"restic snapshots on {target.url} was interrupted (SIGINT, exit 130)" in (
        listed.stderr
    ), listed.stderr
    created = run_cli("create", "--data-dir", str(data_dir), "--target", target.url, env=env)
    assert created.returncode == 1
    assert f"restic backup on {target.url} was interrupted (SIGINT, exit 130)" in (
        created.stderr
    ), created.stderr
    assert len(listed_ids(target)) == 1, "the interrupted backup wrote no snapshot"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RESTIC_COMPRESSION", "smallest"),
        ("RESTIC_PACK_SIZE", "16MiB"),
        ("RESTIC_READ_CONCURRENCY", "two"),
    ],
)
def test_an_environment_value_restic_refuses_is_named(
    variable: str, value: str, data_dir: Path, tmp_path: Path
) -> None:
    target = file_target(tmp_path)
    env = {**target.env, variable: value}
    created = run_cli("create", "--data-dir", str(data_dir), "--target", target.url, env=env)
    assert created.returncode == 1
    expected = (
        f"backup repository {target.url}: restic refuses the environment variable {variable} "
        f'(fix or unset it): Fatal: invalid value for {variable} "{value}"'
    )
    assert expected in created.stderr, created.stderr
    assert target.object_keys() == [], "restic stopped before it wrote anything"

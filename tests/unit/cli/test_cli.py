"""The CLI contract: groups, help, and exit codes (0 ok, 1 failure, 2 usage)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import run_cli

from hermes_runtime.cli import main

GROUPS = ["plugins", "backup", "lcm", "vault", "agent"]


def test_top_level_help_lists_every_group() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for group in GROUPS:
        assert group in result.stdout


@pytest.mark.parametrize("group", GROUPS)
def test_group_help_works(group: str) -> None:
    result = run_cli(group, "--help")
    assert result.returncode == 0, result.stderr
    assert "<verb>" in result.stdout


def test_unknown_group_is_a_usage_error() -> None:
    result = run_cli("frobnicate")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


@pytest.mark.parametrize("group", GROUPS)
def test_unknown_verb_is_a_usage_error(group: str) -> None:
    result = run_cli(group, "no-such-verb")
    assert result.returncode == 2


def test_missing_verb_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exc:
        main(["backup"])
    assert exc.value.code == 2


def test_console_script_is_installed() -> None:
    """The ``hermes-runtime`` script sits beside the interpreter that runs the tests."""
    script = Path(sys.executable).parent / "hermes-runtime"
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True)
    assert result.returncode == 0
    assert result.stdout.startswith("hermes-runtime ")


def test_plugins_link_reports_each_failure_once(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    spec = tmp_path / "plugins.yaml"
    spec.write_text("plugins:\n  - name: weather\n")
    args = ("plugins", "link", "--data-dir", str(tmp_path / "data"), "--spec", str(spec))
    text = run_cli(*args)
    assert text.returncode == 1
    mentions = [line for line in (text.stdout + text.stderr).splitlines() if "weather" in line]
    assert mentions == [
        f"error: plugin weather: {tmp_path}/data/.git-sync/weather/current does not exist "
        "(git-sync has not synced yet)"
    ]
    as_json = run_cli(*args, "--json")
    assert as_json.returncode == 1 and "weather" not in as_json.stderr
    assert len(as_json.stdout.strip().splitlines()) == 1
    assert json.loads(as_json.stdout)["plugins"][0]["status"] == "failed"

"""The CLI contract: groups, help, and exit codes (0 ok, 1 failure, 2 usage)."""

from __future__ import annotations

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

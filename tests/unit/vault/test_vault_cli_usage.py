"""`hermes-runtime vault` argument handling: usage errors exit 2 before touching Vault."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hermes_runtime", "vault", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


BASE = ["--addr", "http://127.0.0.1:1", "--secret", "kv/x#k=ENV"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["render", *BASE, "--auth", "kubernetes", "--out", "o"], "--role"),
        (["render", *BASE, "--auth", "approle", "--out", "o"], "--role-id-file"),
        (["render", *BASE, "--auth", "token"], "--out"),
        (["render", "--addr", "x", "--auth", "token", "--out", "o"], "--secret"),
        (["render", *BASE, "--auth", "token", "--out", "o", "--secret", "nohash"], "PATH#KEY=ENV"),
        (["render", *BASE, "--auth", "token", "--out", "o", "--refresh", "0"], "--refresh"),
        (["render", *BASE, "--auth", "ldap", "--out", "o"], "invalid choice"),
        (["exec", *BASE, "--auth", "token"], "command"),
        (["exec", *BASE, "--auth", "token", "--"], "command"),
    ],
)
def test_usage_errors_exit_2_with_the_option_named(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


def test_render_help_documents_the_secret_format() -> None:
    result = run("render", "--help")
    assert result.returncode == 0
    assert "PATH#KEY=ENV" in result.stdout and "--refresh" in result.stdout


def test_duplicate_variable_is_an_operational_error(tmp_path: Path) -> None:
    result = run(
        "render", "--addr", "http://127.0.0.1:1", "--auth", "token",
        "--secret", "a#k=X", "--secret", "b#k=X", "--out", str(tmp_path / "o"),
    )  # fmt: skip
    assert result.returncode == 1
    assert "both set X" in result.stderr
    assert not (tmp_path / "o").exists()

"""`hermes-runtime vault` argument handling: usage errors exit 2 before touching Vault.

In-process through the CLI's ``main`` (the exit code is its return value or argparse's
``SystemExit``); the console entry itself, as a process, is tests/unit/cli/test_error_path.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from hermes_runtime.cli import main


@dataclass(frozen=True)
class Result:
    returncode: int | str | None
    stdout: str
    stderr: str


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """``hermes-runtime vault ARGS``: its exit code and what it printed."""

    def invoke(*args: str) -> Result:
        try:
            code: int | str | None = main(["vault", *args])
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return invoke


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
def test_usage_errors_exit_2_with_the_option_named(
    run: Callable[..., Result], args: list[str], message: str
) -> None:
    result = run(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr


def test_render_help_documents_the_secret_format(run: Callable[..., Result]) -> None:
    result = run("render", "--help")
    assert result.returncode == 0
    assert "PATH#KEY=ENV" in result.stdout and "--refresh" in result.stdout


def test_duplicate_variable_is_an_operational_error(
    run: Callable[..., Result], tmp_path: Path
) -> None:
    result = run(
        "render", "--addr", "http://127.0.0.1:1", "--auth", "token",
        "--secret", "a#k=X", "--secret", "b#k=X", "--out", str(tmp_path / "o"),
    )  # fmt: skip
    assert result.returncode == 1
    assert "both set X" in result.stderr
    assert not (tmp_path / "o").exists()

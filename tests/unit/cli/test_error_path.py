"""The CLI's one error path, as an operator meets it.

Each case runs the real console entry (``python -m hermes_runtime``) in a
subprocess with bad arguments or a bad environment and checks the contract
of ``hermes_runtime.cli``: exit 1 with one ``error:`` line naming what is
wrong, or exit 2 with argparse's usage message; never a traceback, never
an ``unexpected`` (a bug that reached the catch-all). A second set walks
every option of every verb in-process and feeds it a value of the wrong kind.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.cli import run_cli, verb_parsers
from support.restic import restic_env

from hermes_runtime.cli import _shared, build_parser, main

NUMBER_OR_URL_TYPES = {
    _shared.positive_int,
    _shared.non_negative_int,
    _shared.positive_float,
    _shared.non_negative_float,
    _shared.port,
    _shared.http_url,
}


@dataclass(frozen=True)
class Case:
    """One bad invocation: ``{tmp}`` in argv or env values is replaced by a scratch dir."""

    argv: tuple[str, ...]
    code: int
    names: tuple[str, ...] = ()  # what the message must name
    env: dict[str, str] = field(default_factory=dict)


SECRET = "a#b=C"
VAULT = ("--auth", "token", "--secret", SECRET, "--out", "{tmp}/env")

CASES = {
    # the cases
    "s3 endpoint without scheme": Case(
        ("backup", "list", "--target", "s3://b/p", "--s3-endpoint", "127.0.0.1:9000"),
        2,
        ("--s3-endpoint", "127.0.0.1:9000"),
    ),
    "AWS_ENDPOINT_URL without scheme": Case(
        ("backup", "list", "--target", "s3://b/p"),
        1,
        ("AWS_ENDPOINT_URL", "minio:9000"),
        {"AWS_ENDPOINT_URL": "minio:9000"},
    ),
    "restore into a file": Case(
        ("backup", "restore", "--target", "file://{tmp}/backups", "--data-dir", "{tmp}/a-file"),
        1,
        ("--data-dir", "a-file"),
    ),
    "vault addr without scheme": Case(
        ("vault", "render", "--addr", "vault.example:8200", *VAULT),
        2,
        ("--addr", "vault.example:8200"),
    ),
    "prune keep-last 0": Case(
        ("backup", "prune", "--target", "file://{tmp}/backups", "--keep-last", "0"),
        2,
        ("--keep-last",),
    ),
    "lcm import FILE without --session": Case(
        ("lcm", "import", "--db", "{tmp}/lcm.db", "{tmp}/a-file"), 2, ("--session",)
    ),
    "agent prepare with a missing seed": Case(
        ("agent", "prepare", "--seed-config", "/nope.yaml"), 1, ("--seed-config", "/nope.yaml")
    ),
    "agent prepare with a missing plugin spec": Case(
        ("agent", "prepare", "--spec", "/nope/plugins.yaml"), 1, ("--spec", "/nope/plugins.yaml")
    ),
    # our own
    "VAULT_ADDR without scheme": Case(
        ("vault", "render", *VAULT),
        1,
        ("VAULT_ADDR", "vault.example:8200"),
        {"VAULT_ADDR": "vault.example:8200", "VAULT_TOKEN": "s.x"},
    ),
    "vault without an address": Case(("vault", "render", *VAULT), 2, ("--addr", "VAULT_ADDR")),
    "vault unreachable": Case(
        ("vault", "render", "--addr", "http://127.0.0.1:9", *VAULT),
        1,
        ("http://127.0.0.1:9",),
        {"VAULT_TOKEN": "s.x"},
    ),
    "vault kubernetes without role": Case(
        (
            "vault",
            "render",
            "--addr",
            "http://v:8200",
            "--auth",
            "kubernetes",
            "--secret",
            SECRET,
            "--out",
            "{tmp}/env",
        ),
        2,
        ("--role",),
    ),
    "vault refresh 0": Case(
        ("vault", "render", "--addr", "http://v:8200", *VAULT, "--refresh", "0"), 2, ("--refresh",)
    ),
    "vault exec without a command": Case(
        ("vault", "exec", "--addr", "http://v:8200", *VAULT[:4]), 2, ("command",)
    ),
    "vault bad secret spec": Case(
        (
            "vault",
            "render",
            "--addr",
            "http://v:8200",
            "--auth",
            "token",
            "--secret",
            "nohash",
            "--out",
            "{tmp}/env",
        ),
        2,
        ("--secret",),
    ),
    "restore --force with --if-empty": Case(
        ("backup", "restore", "--target", "file://{tmp}/backups", "--force", "--if-empty"),
        2,
        ("--force", "--if-empty"),
    ),
    "backup create from a missing data dir": Case(
        ("backup", "create", "--target", "file://{tmp}/backups", "--data-dir", "{tmp}/none"),
        1,
        ("{tmp}/none",),
    ),
    "backup create: HERMES_HOME missing": Case(
        ("backup", "create", "--target", "file://{tmp}/backups"),
        1,
        ("{tmp}/gone",),
        {"HERMES_HOME": "{tmp}/gone"},
    ),
    "backup without a repository password": Case(
        ("backup", "list", "--target", "file://{tmp}/backups"),
        1,
        ("RESTIC_PASSWORD", "file://{tmp}/backups"),
        {"RESTIC_PASSWORD": ""},
    ),
    "backup target with an unknown scheme": Case(
        ("backup", "list", "--target", "ftp://host/x"), 1, ("--target", "ftp://host/x")
    ),
    "backup target missing": Case(
        ("backup", "list", "--target", "file://{tmp}/none"), 1, ("{tmp}/none",)
    ),
    "verify an unknown snapshot": Case(
        ("backup", "verify", "--target", "file://{tmp}/backups", "--snapshot", "nope"),
        1,
        ("nope",),
    ),
    "prune grace nan": Case(
        (
            "backup",
            "prune",
            "--target",
            "file://{tmp}/backups",
            "--keep-last",
            "1",
            "--grace-seconds",
            "nan",
        ),
        2,
        ("--grace-seconds",),
    ),
    "lcm import with nothing to import": Case(("lcm", "import"), 2, ("--hermes-state", "file")),
    "lcm import --hermes-state missing": Case(
        ("lcm", "import", "--db", "{tmp}/lcm.db", "--hermes-state", "{tmp}/none.db"),
        1,
        ("{tmp}/none.db",),
    ),
    "lcm import a file that is not UTF-8": Case(
        ("lcm", "import", "--db", "{tmp}/lcm.db", "--session", "s", "{tmp}/binary"),
        1,
        ("{tmp}/binary",),
    ),
    "lcm import --hermes-state a directory": Case(
        ("lcm", "import", "--db", "{tmp}/lcm.db", "--hermes-state", "{tmp}/backups"),
        1,
        ("--hermes-state", "{tmp}/backups"),
    ),
    "plugins link: config.yaml is not YAML (a multi-line parser message)": Case(
        ("plugins", "link", "--spec", "{tmp}/spec.yaml"),
        1,
        ("{tmp}/bad-home/config.yaml",),
        {"HERMES_HOME": "{tmp}/bad-home"},
    ),
    "agent prepare: a SOUL.md seed that is not text": Case(
        ("agent", "prepare", "--seed-soul", "{tmp}/binary"), 1, ("{tmp}/binary",)
    ),
    "lcm stats: default db missing": Case(("lcm", "stats"), 1, ("{tmp}/home/lcm.db",)),
    "lcm stats on a directory": Case(("lcm", "stats", "--db", "{tmp}"), 1, ("{tmp}",)),
    "lcm grep --limit 0": Case(("lcm", "grep", "--limit", "0", "x"), 2, ("--limit",)),
    "lcm context budget not a number": Case(
        ("lcm", "context", "--session", "s", "--budget", "lots"), 2, ("--budget", "lots")
    ),
    "lcm summaries from a URL without scheme": Case(
        ("lcm", "context", "--session", "s", "--budget", "9", "--llm-base-url", "llm:8080"),
        2,
        ("--llm-base-url",),
    ),
    "plugins link: data dir missing": Case(
        ("plugins", "link", "--spec", "{tmp}/spec.yaml"),
        1,
        ("{tmp}/gone",),
        {"HERMES_HOME": "{tmp}/gone"},
    ),
    "plugins link: spec missing": Case(
        ("plugins", "link", "--spec", "{tmp}/none.yaml"), 1, ("{tmp}/none.yaml",)
    ),
    "plugins watch: interval 0": Case(("plugins", "watch", "--interval", "0"), 2, ("--interval",)),
    "agent prepare: HERMES_HOME is a file": Case(
        ("agent", "prepare"), 1, ("{tmp}/a-file",), {"HERMES_HOME": "{tmp}/a-file"}
    ),
    "agent run: metrics port out of range": Case(
        ("agent", "run", "--metrics-port", "70000"), 2, ("--metrics-port",)
    ),
    "agent run: metrics port env not a number": Case(
        ("agent", "run"),
        1,
        ("HERMES_RUNTIME_METRICS_PORT",),
        {"HERMES_RUNTIME_METRICS_PORT": "abc"},
    ),
    "unknown group": Case(("frobnicate",), 2, ("frobnicate",)),
}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("cli-errors")
    (tmp / "a-file").write_text("not a directory\n")
    (tmp / "binary").write_bytes(b"\xf9\xff\x00 not text")
    (tmp / "backups").mkdir()
    (tmp / "home").mkdir()
    (tmp / "spec.yaml").write_text("plugins: []\n")
    (tmp / "bad-home").mkdir()
    (tmp / "bad-home" / "config.yaml").write_text("model: [\n")
    return tmp


def run_case(case: Case, scratch: Path) -> subprocess.CompletedProcess[str]:
    """One case in a fresh interpreter. Per test, not all cases in a module fixture: with
    pytest-xdist spreading the cases over workers, each worker ran every case again."""
    fill = lambda text: text.replace("{tmp}", str(scratch))  # noqa: E731
    env = {"HERMES_HOME": str(scratch / "home"), **restic_env()}
    env.update({key: fill(value) for key, value in case.env.items()})
    return run_cli(*(fill(arg) for arg in case.argv), env=env)


@pytest.mark.parametrize("name", CASES)
def test_bad_invocation_gets_a_message_and_the_promised_exit_code(name: str, scratch: Path) -> None:
    case = CASES[name]
    result = run_case(case, scratch)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == case.code, result.stderr
    lines = result.stderr.strip().splitlines()
    if case.code == 2:
        assert lines[0].startswith("usage: hermes-runtime"), result.stderr
        assert ": error: " in lines[-1]
    else:
        assert lines[-1].startswith("error: "), result.stderr
        assert "unexpected" not in lines[-1], result.stderr
        messages = [line for line in lines if not line.startswith("{")]  # JSON lines are logs
        assert messages == [lines[-1]], "the failure must be one line"
    for needed in case.names:
        assert needed.replace("{tmp}", str(scratch)) in lines[-1], result.stderr


def test_debug_shows_the_traceback(scratch: Path) -> None:
    for flags, env in ((["--debug"], {}), ([], {"HERMES_RUNTIME_DEBUG": "1"})):
        result = run_cli(*flags, "lcm", "stats", "--db", str(scratch / "none.db"), env=env)
        assert result.returncode == 1
        assert "Traceback (most recent call last)" in result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    after_verb = run_cli("lcm", "stats", "--db", str(scratch / "none.db"), "--debug")
    assert "Traceback" in after_verb.stderr and after_verb.returncode == 1


def _closed_pipe_run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run with stdout a pipe whose reader has already gone (``| head`` that exited)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "hermes_runtime", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
            check=False,
            timeout=120,
        )
    finally:
        os.close(write_end)


def test_a_closed_stdout_ends_quietly(scratch: Path) -> None:
    data = scratch / "pipe-data"
    data.mkdir()
    (data / "notes.txt").write_text("hello\n")
    target = f"file://{scratch}/pipe-backups"
    (scratch / "pipe-backups").mkdir()
    created = run_cli(
        "backup", "create", "--data-dir", str(data), "--target", target, env=restic_env()
    )
    assert created.returncode == 0, created.stderr
    for argv in (("backup", "list", "--target", target), ("--help",), ("backup", "--help")):
        result = _closed_pipe_run(*argv, env=restic_env())
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr and "Broken pipe" not in result.stderr
        assert "BrokenPipeError" not in result.stderr


def _typed_options() -> Iterator[tuple[str, str, str]]:
    for group, verb, parser in verb_parsers(build_parser()):
        for action in parser._actions:
            if action.option_strings and action.type in NUMBER_OR_URL_TYPES:
                yield group, verb, action.option_strings[0]


@pytest.mark.parametrize(("group", "verb"), [(g, v) for g, v, _ in verb_parsers(build_parser())])
def test_every_verb_refuses_an_unknown_option(
    group: str, verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main([group, verb, "--no-such-option"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --no-such-option" in err or "required" in err


@pytest.mark.parametrize(("group", "verb", "option"), list(_typed_options()))
def test_every_checked_option_refuses_a_value_of_the_wrong_kind(
    group: str, verb: str, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for bad in ("nan", "-1", "x"):
        with pytest.raises(SystemExit) as exc:
            main([group, verb, option, bad])
        assert exc.value.code == 2, (option, bad)
        assert f"error: argument {option}" in capsys.readouterr().err


def test_every_option_of_every_verb_has_help() -> None:
    missing = [
        f"{group} {verb} {action.dest}"
        for group, verb, parser in verb_parsers(build_parser())
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
        and (not action.help or action.help == argparse.SUPPRESS)
    ]
    assert missing == []


def test_every_verb_takes_json_and_debug() -> None:
    for group, verb, parser in verb_parsers(build_parser()):
        options = {o for action in parser._actions for o in action.option_strings}
        assert {"--json", "--debug"} <= options, f"{group} {verb}"


def test_json_output_of_a_verb_parses(scratch: Path) -> None:
    data = scratch / "json-data"
    data.mkdir()
    (data / "a.txt").write_text("a\n")
    (scratch / "json-backups").mkdir()
    target = f"file://{scratch}/json-backups"
    env = restic_env()
    created = run_cli(
        "backup", "create", "--json", "--data-dir", str(data), "--target", target, env=env
    )
    assert json.loads(created.stdout)["files"] == 1
    listed = run_cli("backup", "list", "--target", target, "--json", env=env)
    assert [s["id"] for s in json.loads(listed.stdout)] == [json.loads(created.stdout)["id"]]

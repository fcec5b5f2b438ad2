"""A ``hermes-runtime`` start imports only the group it runs (issue 12).

Every CLI start is a fresh interpreter (a CronJob, an init container, each of
the error-path tests), so importing every capability (boto3, hvac, numpy,
Hermes) for ``--help`` or a usage error is paid again and again. The parser
built for one group must still be the whole CLI's: same options, same help.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.cli import verb_parsers

from hermes_runtime.cli import build_parser, main
from hermes_runtime.cli._shared import subcommands

# CLI group -> the capability package it calls.
PACKAGE_OF = {
    "agent": "agent",
    "backup": "backup",
    "lcm": "lcm",
    "plugins": "plugins",
    "secrets": "clustersecrets",
    "vault": "vault",
}
CAPABILITIES = tuple(PACKAGE_OF.values())
HEAVY = ("apsw", "boto3", "botocore", "hermes_cli", "httpx", "hvac", "numpy", "prometheus_client")
PROBE = """
import json, sys
from hermes_runtime.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _start(*argv: str) -> tuple[int, set[str]]:
    """Exit code and the top-level names of the modules a fresh start has imported."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    loaded = set()
    for name in report["modules"]:
        parts = name.split(".")
        loaded.add(parts[0])
        if parts[0] == "hermes_runtime" and len(parts) > 1:
            loaded.add(f"hermes_runtime.{parts[1]}")
    return report["code"], loaded


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (("--version",), 0),
        (("--help",), 0),
        (("lcm", "--help"), 0),
        (("lcm", "grep", "--limit", "0", "x"), 2),
        (("lcm", "import", "history.jsonl"), 2),  # FILE without --session
        (("backup", "list", "--help"), 0),
        (("backup", "create"), 2),
        (("plugins", "watch", "--interval", "0"), 2),
        (("agent", "run", "--help"), 0),
        (("agent", "prepare", "--seed-config", "/nonexistent/seed.yaml"), 1),
        (("frobnicate",), 2),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else f"exit {value}",
)
def test_help_usage_errors_and_typos_import_no_capability(argv: tuple[str, ...], code: int) -> None:
    exit_code, loaded = _start(*argv)
    assert exit_code == code
    assert loaded & {f"hermes_runtime.{c}" for c in CAPABILITIES} == set()
    assert loaded & set(HEAVY) == set()


def test_a_vault_start_imports_vault_and_nothing_else() -> None:
    """Its options need the vault package's names; the other groups stay unloaded."""
    exit_code, loaded = _start("vault", "render", "--help")
    assert exit_code == 0
    assert "hermes_runtime.vault" in loaded
    others = {f"hermes_runtime.{c}" for c in CAPABILITIES if c != "vault"}
    assert loaded & others == set()
    assert loaded & {"apsw", "boto3", "hermes_cli", "numpy"} == set()


def test_top_level_and_group_help_are_the_whole_clis(capsys: pytest.CaptureFixture[str]) -> None:
    full = build_parser()
    groups = subcommands(full)
    assert sorted(groups) == sorted(PACKAGE_OF)
    for argv, parser in [([], full), *(([name], group) for name, group in groups.items())]:
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--help"])
        assert exc.value.code == 0
        assert capsys.readouterr().out == parser.format_help(), argv


@pytest.mark.parametrize(("group", "verb"), [(g, v) for g, v, _ in verb_parsers(build_parser())])
def test_verb_help_shows_every_option(
    group: str, verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The help of a verb, from the parser built for its group alone, is the full CLI's."""
    full = {(g, v): p for g, v, p in verb_parsers(build_parser())}[(group, verb)]
    with pytest.raises(SystemExit) as exc:
        main([group, verb, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out == full.format_help()
    options = [o for action in full._actions for o in action.option_strings]
    assert options and all(option in out for option in options)


def test_the_lcm_groups_model_choices_are_the_packages_embedders() -> None:
    """Spelled out in the CLI so building its parser imports no capability."""
    from hermes_runtime.cli.lcm import EMBEDDER_CHOICES
    from hermes_runtime.lcm.embed.embedders import EMBEDDER_NAMES

    assert EMBEDDER_CHOICES == EMBEDDER_NAMES

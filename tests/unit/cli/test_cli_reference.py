"""docs/cli.md is generated from the parser (ci/gen-cli-reference.py) and stays in sync."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.cli import verb_parsers

from hermes_runtime.cli import build_parser

REPO = Path(__file__).resolve().parents[3]
GENERATOR = REPO / "ci" / "gen-cli-reference.py"


def test_docs_cli_md_matches_the_parser() -> None:
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


def test_reference_has_a_section_and_every_option_of_every_verb() -> None:
    text = (REPO / "docs" / "cli.md").read_text()
    for group, verb, parser in verb_parsers(build_parser()):
        start = text.index(f"### `hermes-runtime {group} {verb}`")
        end = text.find("\n### ", start + 1)
        section = text[start : end if end != -1 else len(text)]
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help", "--json", "--debug"):
                    assert f"`{option}" in section or f", {option}" in section, (group, verb)


def test_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "cli.md"
    stale.write_text((REPO / "docs" / "cli.md").read_text().replace("--keep-last", "--keep"))
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check", "--out", str(stale)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "out of date" in result.stderr

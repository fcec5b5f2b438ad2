"""Every ``hermes-runtime`` command the docs show names a real verb and real options.

The docs are read as an operator would copy them: each line (in a code block
or inline code) that starts with ``hermes-runtime <group> <verb>`` is split
like a shell would, and every ``--option`` on it must exist on that verb's
parser. Values are placeholders (``<id>``, ``$TARGET``) so they are not
parsed; the ones that can run without a cluster run in test_cli/test_error_path.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from support.cli import verb_parsers

from hermes_runtime.cli import build_parser

REPO = Path(__file__).resolve().parents[3]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
COMMAND = re.compile(r"hermes-runtime (?:--debug )?([a-z]+) ([a-z]+(?:-[a-z]+)*)\b([^`\n|]*)")
GENERATED = {"cli.md"}  # rendered from the parser itself


def _options_by_verb() -> dict[tuple[str, str], set[str]]:
    return {
        (group, verb): {o for action in parser._actions for o in action.option_strings}
        for group, verb, parser in verb_parsers(build_parser())
    }


def _doc_commands() -> list[tuple[str, str, str, str]]:
    found = []
    for doc in DOCS:
        if doc.name in GENERATED:
            continue
        for match in COMMAND.finditer(doc.read_text()):
            group, verb, rest = match.groups()
            if group in ("group",):  # "hermes-runtime <group> <verb>" prose
                continue
            found.append((doc.name, group, verb, rest))
    return found


def _tokens(rest: str) -> list[str]:
    text = re.sub(r"<[^>]*>", "X", rest.split(" #", 1)[0]).replace("\\", " ")
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote in prose around the command
        return text.split()


@pytest.mark.parametrize(("doc", "group", "verb", "rest"), _doc_commands())
def test_command_in_docs_matches_the_parser(doc: str, group: str, verb: str, rest: str) -> None:
    options = _options_by_verb()
    assert (group, verb) in options, f"{doc}: hermes-runtime {group} {verb} is not a command"
    for token in _tokens(rest):
        if token in ("|", "&&", ";", "||") or token.startswith(">"):
            break  # the next command of a pipeline is not ours
        for name in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", token.split("=", 1)[0]):
            assert name in options[(group, verb)], f"{doc}: {group} {verb} has no {name}"


def test_docs_show_commands() -> None:
    """The scan finds the commands (a broken pattern would make every test above vacuous)."""
    commands = {(group, verb) for _, group, verb, _ in _doc_commands()}
    assert {("backup", "restore"), ("lcm", "grep"), ("vault", "render")} <= commands

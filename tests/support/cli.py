"""Run the ``hermes-runtime`` CLI the way an operator does, and walk its parser."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m hermes_runtime ARGS`` in a fresh interpreter; ``env`` adds to ours."""
    return subprocess.run(
        [sys.executable, "-m", "hermes_runtime", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=timeout,
    )


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-parsers of ``parser`` by name (empty when it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def verb_parsers(
    root: argparse.ArgumentParser,
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Every ``(group, verb, parser)`` of the CLI, in the order ``--help`` lists them."""
    for group, group_parser in subcommands(root).items():
        for verb, parser in subcommands(group_parser).items():
            yield group, verb, parser

"""Run the ``hermes-runtime`` CLI the way an operator does, and walk its parser."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator

from hermes_runtime.cli._shared import subcommands

Verb = tuple[str, str, argparse.ArgumentParser]


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


def verb_parsers(root: argparse.ArgumentParser) -> Iterator[Verb]:
    """Every ``(group, verb, parser)`` of the CLI, in the order ``--help`` lists them."""
    for group, group_parser in subcommands(root).items():
        for verb, parser in subcommands(group_parser).items():
            yield group, verb, parser

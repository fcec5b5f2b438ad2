"""Helpers for group modules: a group parser whose verb is required."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_group(subparsers: Any, name: str, help_text: str) -> Any:
    """Add ``name`` as a group and return its verb sub-parsers (a verb is required)."""
    group = subparsers.add_parser(name, help=help_text, description=help_text)
    return group.add_subparsers(dest="verb", metavar="<verb>", required=True)


def print_json(payload: Any) -> None:
    json.dump(payload, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def not_implemented(args: argparse.Namespace) -> int:
    print(f"hermes-runtime {args.group} {args.verb}: not implemented yet", file=sys.stderr)
    return 1

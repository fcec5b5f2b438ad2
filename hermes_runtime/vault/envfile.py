"""The secrets env file: one format that both a shell and Python read back exactly.

Why single quotes with ``'\\''`` escaping: images that cannot run Python still
load the file with ``set -a; . FILE`` in any POSIX shell, and single quotes
are the only shell quoting where nothing (``$``, backslash, backtick,
newline) is special. :func:`read_env_file` parses exactly that subset, so the
agent entrypoint gets the same bytes the shell would.

Grammar (one assignment per line outside quotes)::

    line   := blank | "#" comment | ["export "] NAME "=" value
    value  := ( "'" any-but-quote* "'" | "\\" char | safe-char )*

Errors name the file and line, never a value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from hermes_runtime.common.atomic import atomic_write_text
from hermes_runtime.common.errors import RuntimeFailure

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER = "# Rendered by hermes-runtime vault render. Secret values: do not copy, do not back up.\n"
SAFE_BARE_CHARS = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:@%+,-"
)
# Owner writes, the group reads, nobody else: each file's one consumer runs as a UID of its own
# and reads it through the pod's fsGroup (common/groupaccess.py); the file sits on an in-memory
# volume that only the Vault containers and that consumer mount.
SECRET_FILE_MODE = 0o640


class EnvFileError(ValueError):
    """A line that is not in the env-file grammar (message names the line, not the value)."""


def quote_value(value: str) -> str:
    """Single-quote ``value`` for a POSIX shell; a quote becomes ``'\\''``."""
    return "'" + value.replace("'", "'\\''") + "'"


def check_env_name(name: str) -> None:
    if not ENV_NAME.fullmatch(name):
        raise RuntimeFailure(
            f"environment variable name {name!r} is invalid (must match {ENV_NAME.pattern})"
        )


def format_env_file(values: Mapping[str, str]) -> str:
    """Render ``values`` as env-file text, in the mapping's order."""
    lines = [HEADER]
    for name, value in values.items():
        check_env_name(name)
        if "\x00" in value:
            raise RuntimeFailure(
                f"value for {name} contains a NUL byte, which no environment can hold"
            )
        lines.append(f"{name}={quote_value(value)}\n")
    return "".join(lines)


def _parse_value(text: str, pos: int, line_no: int) -> tuple[str, int, int]:
    """Parse one value starting at ``pos``; return (value, position after it, lines consumed)."""
    parts: list[str] = []
    start_line = line_no
    while pos < len(text) and text[pos] != "\n":
        char = text[pos]
        if char == "'":
            end = text.find("'", pos + 1)
            if end < 0:
                raise EnvFileError(f"line {start_line}: unterminated single quote")
            chunk = text[pos + 1 : end]
            parts.append(chunk)
            line_no += chunk.count("\n")
            pos = end + 1
        elif char == "\\":
            if pos + 1 >= len(text):
                raise EnvFileError(f"line {start_line}: backslash at end of file")
            escaped = text[pos + 1]
            if escaped != "\n":  # backslash-newline is a line continuation in the shell
                parts.append(escaped)
            else:
                line_no += 1
            pos += 2
        elif char in SAFE_BARE_CHARS:
            parts.append(char)
            pos += 1
        else:
            raise EnvFileError(f"line {line_no}: unquoted character {char!r} in a value")
    return "".join(parts), pos, line_no


def parse_env_text(text: str) -> dict[str, str]:
    """Parse env-file text (see the module grammar) into an ordered dict."""
    values: dict[str, str] = {}
    pos, line_no = 0, 1
    while pos < len(text):
        end_of_line = text.find("\n", pos)
        end_of_line = len(text) if end_of_line < 0 else end_of_line
        line = text[pos:end_of_line]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            pos, line_no = end_of_line + 1, line_no + 1
            continue
        start = pos + (len(line) - len(line.lstrip()))
        if text.startswith("export ", start):
            start += len("export ")
        equals = text.find("=", start, end_of_line)
        name = text[start:equals] if equals >= 0 else ""
        if not ENV_NAME.fullmatch(name):
            raise EnvFileError(f"line {line_no}: expected NAME=value with a valid variable name")
        value, pos, line_no = _parse_value(text, equals + 1, line_no)
        values[name] = value
        pos, line_no = pos + 1, line_no + 1
    return values


def read_env_file(path: Path) -> dict[str, str]:
    """Read a secrets env file written by :func:`write_env_file` (or by hand in the grammar).

    The agent entrypoint calls this to load ``HERMES_RUNTIME_SECRETS_ENV``.
    Bytes are decoded as UTF-8 without newline translation, so ``\\r`` survives.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise RuntimeFailure(f"secrets env file {path} does not exist") from None
    except OSError as exc:
        raise RuntimeFailure(f"cannot read secrets env file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise RuntimeFailure(f"secrets env file {path} is not valid UTF-8") from None
    try:
        return parse_env_text(text)
    except EnvFileError as exc:
        raise RuntimeFailure(f"secrets env file {path}: {exc}") from None


def write_env_file(path: Path, values: Mapping[str, str]) -> None:
    """Write ``values`` with :data:`SECRET_FILE_MODE` atomically: readers see the old file or
    the new one."""
    text = format_env_file(values)
    try:
        atomic_write_text(Path(path), text, mode=SECRET_FILE_MODE)
    except OSError as exc:
        raise RuntimeFailure(f"cannot write secrets env file {path}: {exc.strerror}") from None

"""Regular expressions for ``lcm_grep regex=true``, matched in linear time by RE2.

The model chooses the pattern and the scan runs over every stored message: with
Python's backtracking ``re`` a pattern such as ``(a+)+$`` against a long run of
``a`` followed by ``b`` takes exponential time and holds a thread (and the
database read) for hours. RE2 (``google-re2``) compiles to an automaton whose
match time is linear in the text, so no pattern can hang a search. The price is
RE2's syntax: no backreferences (``\\1``) and no lookaround (``(?=``, ``(?<=``);
such a pattern is refused with an error naming it.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import re2

from hermes_runtime.common.errors import RuntimeFailure

# Compiled programs kept per pattern: the SQLite function sees the pattern once a row.
CACHE_SIZE = 64


def check_pattern(pattern: str) -> None:
    """Raise ``RuntimeFailure`` naming ``pattern`` if RE2 cannot run it, and say why."""
    _compiled(pattern)


def regexp(pattern: str, value: str | None) -> bool:
    """SQLite's ``value REGEXP pattern``: whether RE2 finds ``pattern`` anywhere in ``value``."""
    if value is None:
        return False
    program = _compiled(pattern)
    try:
        return program.search(value) is not None
    except UnicodeEncodeError:
        # A lone surrogate (RE2 matches UTF-8): match what can be encoded.
        return program.search(value.encode("utf-8", "replace").decode("utf-8")) is not None


@functools.lru_cache(maxsize=CACHE_SIZE)
def _compiled(pattern: str) -> Any:
    options = re2.Options()
    options.log_errors = False  # the error is ours to report, not a line on stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        raise RuntimeFailure(_explain(pattern, exc)) from None


def _explain(pattern: str, exc: Exception) -> str:
    reason = exc.args[0] if exc.args else exc
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", "replace")
    if _python_accepts(pattern):
        return (
            f"LCM grep: regular expression {pattern!r} is not supported: {reason} "
            "(searches use RE2, which runs in linear time: no backreferences like \\1, "
            "no lookahead or lookbehind)"
        )
    return f"LCM grep: invalid regular expression {pattern!r}: {reason}"


def _python_accepts(pattern: str) -> bool:
    """Whether the pattern is valid Python syntax (only compiled, never run: no backtracking)."""
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return False
    return True

"""Adapter: the columns of Hermes' ``state.db`` ``messages`` table that LCM's import reads.

``lcm import --hermes-state`` (and the plugin's day-one import, which runs it in a child
process) reads ``id, session_id, role, content, tool_call_id, tool_calls, tool_name,
timestamp`` from ``messages`` (Hermes 0.19.0's ``hermes_state.py`` schema). The caller
passes the columns the file has (``PRAGMA table_info(messages)``) and refuses the import
with the message when one is missing: nothing is imported from a table read wrongly.
"""

from __future__ import annotations

from collections.abc import Iterable

from hermes_runtime.compat.version import Verdict, installed_version

INTERNAL = "state.db messages table (hermes_state.SessionDB)"
READ_COLUMNS = frozenset(
    {"id", "session_id", "role", "content", "tool_call_id", "tool_calls", "tool_name", "timestamp"}
)


def columns_problem(columns: Iterable[str]) -> str | None:
    """Which columns the import reads are missing (None: all are there)."""
    missing = sorted(READ_COLUMNS - set(columns))
    return f"messages lacks {', '.join(missing)}" if missing else None


def check_state_db(columns: Iterable[str], version: str | None = None) -> Verdict:
    """The table's columns, checked; the version is only reported, not required.

    Unlike the other adapters this one reads data, not code: a ``state.db`` outlives the
    Hermes that wrote it (a restored volume, an archive), so the installed version says
    nothing about it, and the columns are the whole contract.
    """
    return Verdict(INTERNAL, version or installed_version(), columns_problem(columns))

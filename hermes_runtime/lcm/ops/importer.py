"""Bring existing history into LCM: OpenAI-format JSONL files and Hermes' own state.db.

Importing is batched (one transaction per chunk of messages) and checked
line by line first, so a bad line is reported with its number and nothing
from that file is half-imported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.common.logs import reporter
from hermes_runtime.compat import columns_problem
from hermes_runtime.lcm.engine.lcmengine import LcmEngine
from hermes_runtime.lcm.store import sessions
from hermes_runtime.lcm.store.schema import fetch_all

BATCH = 500
ROLES = ("system", "user", "assistant", "tool", "developer")
# Objects and arrays nested deeper than this are refused: Python's parser raises
# RecursionError near 1,000 levels, and code that walks a message recursively (JSON
# encoding, fingerprints) fails far earlier in a deep call stack. Real messages nest a
# handful of levels (tool calls: message > tool_calls > call > function > arguments).
MAX_DEPTH = 64


@dataclass
class ImportReport:
    sessions: list[str] = field(default_factory=list)
    messages: int = 0
    skipped_sessions: list[str] = field(default_factory=list)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Parse and validate every line before anything is stored."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RuntimeFailure(f"cannot read {path}: {exc}") from exc
    messages = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            message = parse_bounded(line)
        except json.JSONDecodeError as exc:
            raise RuntimeFailure(f"{path}:{number}: not JSON: {exc.msg}") from exc
        except TooDeep as exc:
            raise RuntimeFailure(f"{path}:{number}: {exc}") from None
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise RuntimeFailure(f"{path}:{number}: field 'role' must be one of {', '.join(ROLES)}")
        messages.append(message)
    return messages


class TooDeep(ValueError):
    """A JSON document nests objects and arrays deeper than ``MAX_DEPTH``."""


def parse_bounded(text: str) -> Any:
    """``json.loads`` that refuses nesting past ``MAX_DEPTH`` with ``TooDeep``.

    Python's parser recurses and dies with ``RecursionError`` on a deep enough line;
    that is caught here, and anything it parses is measured without recursion.
    """
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if _depth_exceeds(value, MAX_DEPTH):
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether objects and arrays nest more than ``limit`` deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list):
            continue
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)
    return False


def import_messages(engine: LcmEngine, session_id: str, messages: list[dict[str, Any]]) -> int:
    total = 0
    with reporter("lcm.import") as report:
        report.start_task(f"importing {session_id}", len(messages))
        for start in range(0, len(messages), BATCH):
            chunk = messages[start : start + BATCH]
            total += engine.ingest(session_id, chunk)
            report.advance(len(chunk))
    return total


def _check_columns(conn: apsw.Connection, state_db: Path) -> None:
    """Refuse a ``messages`` table that lacks a column the import reads (another Hermes
    wrote it): nothing is imported from a table read wrongly."""
    columns = [row[1] for row in conn.execute("PRAGMA table_info(messages)")]
    problem = columns_problem(columns) if columns else "it has no messages table"
    if problem:
        raise RuntimeFailure(
            f"Hermes state database {state_db}: {problem} (the import reads the columns of "
            "Hermes 0.19's messages table; docs/hermes-versions.md)"
        )


def hermes_sessions(
    state_db: Path, before: float | None = None
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Yield (session id, OpenAI messages) from Hermes' state.db, oldest session first.

    ``before`` (epoch seconds) keeps only messages written earlier: the day-one
    import archives what predates LCM, while turns after it are stored live.
    """
    cutoff = before if before is not None else float("inf")
    if not state_db.exists():
        raise RuntimeFailure(f"Hermes state database {state_db} does not exist")
    conn = apsw.Connection(str(state_db), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(30_000)
    try:
        _check_columns(conn, state_db)
        sessions = [
            r[0]
            for r in conn.execute(
                "SELECT session_id, min(id) AS first FROM messages WHERE timestamp < ? "
                "GROUP BY session_id ORDER BY first",
                (cutoff,),
            )
        ]
        for session_id in sessions:
            rows = fetch_all(
                conn,
                "SELECT role, content, tool_call_id, tool_calls, tool_name FROM messages "
                "WHERE session_id = ? AND role IN ('user', 'assistant', 'tool') "
                "AND timestamp < ? ORDER BY id",
                (session_id, cutoff),
            )
            yield session_id, [_hermes_row(*row) for row in rows]
    except apsw.Error as exc:
        raise RuntimeFailure(f"Hermes state database {state_db}: {exc}") from exc
    finally:
        conn.close()


def _hermes_row(
    role: str,
    content: str | None,
    tool_call_id: str | None,
    tool_calls: str | None,
    name: str | None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "content": content}
    if tool_calls:
        try:
            message["tool_calls"] = parse_bounded(tool_calls)
        except (json.JSONDecodeError, TooDeep):
            message["content"] = (content or "") + f"\n[tool calls: {tool_calls[:2000]}]"
    if tool_call_id:
        message["tool_call_id"] = tool_call_id
    if role == "tool" and name:
        message["name"] = name
    return message


def import_hermes_state(
    engine: LcmEngine, state_db: Path, prefix: str = "", before: float | None = None
) -> ImportReport:
    """Import every Hermes session LCM does not know yet (re-running is safe).

    ``prefix`` namespaces the imported sessions (the plugin's day-one import
    uses ``hermes-state:``) so an archive never mixes with a live session
    that Hermes resumes under the same id.
    """
    report = ImportReport()
    for hermes_id, messages in hermes_sessions(state_db, before):
        session_id = prefix + hermes_id
        if sessions.has_session(engine.store, session_id):
            report.skipped_sessions.append(session_id)
            continue
        report.messages += import_messages(engine, session_id, messages)
        report.sessions.append(session_id)
    return report

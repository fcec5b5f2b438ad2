"""The adapters other than the context engine's, each against the installed Hermes 0.19.0
(its real modules and files) and against fake module objects or versions as another Hermes
would present them."""

from __future__ import annotations

import contextvars
import json
import threading
import types
from pathlib import Path
from typing import Any

import apsw
import pytest

from hermes_runtime.compat import (
    READ_COLUMNS,
    Accepts,
    check_launch,
    check_state_db,
    drain_control,
    on_review_thread,
    parse_version,
    review_marker,
    version_problem,
)


def events(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capsys.readouterr().err.splitlines()]


# -- versions ---------------------------------------------------------------------------------


def test_versions_parse_and_fall_in_or_out_of_range() -> None:
    assert parse_version("0.19.0") == (0, 19, 0)
    assert parse_version("0.23") == (0, 23, 0)
    assert parse_version("0.23.5rc1") == (0, 23, 5)
    assert parse_version("banana") is None
    accepts = Accepts("0.19.0", "0.24")
    assert "0.19.0" in accepts and "0.23.5" in accepts
    assert "0.18.9" not in accepts and "0.24.0" not in accepts and "x" not in accepts
    assert version_problem("0.23.5") is None
    assert "unknown" in str(version_problem(None))
    assert "tested: 0.19.0" in str(version_problem("1.0.0"))


# -- background review marker -------------------------------------------------------------------


def test_the_installed_review_marker_tells_the_fork_thread_apart() -> None:
    import hermes_cli.plugins as plugins

    assert isinstance(review_marker(plugins), threading.local)
    seen: list[bool] = []

    def fork() -> None:
        plugins.set_thread_tool_whitelist({"memory"})
        try:
            seen.append(on_review_thread(plugins))
        finally:
            plugins.clear_thread_tool_whitelist()

    thread = threading.Thread(target=fork)
    thread.start()
    thread.join()
    assert seen == [True] and on_review_thread(plugins) is False


@pytest.mark.parametrize(
    ("marker", "problem"),
    [(None, "has no _thread_tool_whitelist"), (contextvars.ContextVar("m"), "not a threading")],
)
def test_a_moved_review_marker_is_degraded_once(
    marker: Any, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    plugins = types.ModuleType("hermes_cli.plugins")
    if marker is not None:
        plugins._thread_tool_whitelist = marker  # type: ignore[attr-defined]
    assert on_review_thread(plugins) is False
    assert on_review_thread(plugins) is False  # asked every turn, logged once
    (event,) = events(capsys)
    assert event["event"] == "hermes.compat.degraded" and problem in event["problem"]
    assert "harness turn" in event["fallback"]


# -- drain marker -------------------------------------------------------------------------------


def test_the_drain_marker_is_written_by_the_installed_hermes(tmp_path: Path) -> None:
    from gateway.drain_control import drain_requested

    control = drain_control()
    assert control is not None
    assert control.begin(tmp_path, "hermes-runtime")
    assert drain_requested(home=tmp_path)  # what the gateway's watcher asks
    payload = json.loads((tmp_path / ".drain_request.json").read_text())
    assert payload["principal"] == "hermes-runtime" and payload["suppress_notification"] is True
    assert not control.begin(tmp_path, "hermes-runtime")
    control.clear_own(tmp_path, "someone-else")
    assert drain_requested(home=tmp_path)
    control.clear_own(tmp_path, "hermes-runtime")
    assert not drain_requested(home=tmp_path)


def test_a_drain_contract_of_another_shape_is_degraded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gateway.drain_control as drain
    import gateway.status as status

    renamed = types.ModuleType("gateway.drain_control")
    renamed._DRAIN_REQUEST_FILENAME = ".drain.json"  # type: ignore[attr-defined]
    assert drain_control(renamed, status, "0.19.0") is None
    no_home = types.ModuleType("gateway.drain_control")
    no_home._DRAIN_REQUEST_FILENAME = ".drain_request.json"  # type: ignore[attr-defined]
    no_home.write_drain_request = lambda *, principal, suppress_notification: {}  # type: ignore[attr-defined]
    assert drain_control(no_home, status, "0.19.0") is None
    assert drain_control(drain, status, "0.24.1") is None
    found = events(capsys)
    assert [e["event"] for e in found] == ["hermes.compat.degraded"] * 3
    assert "does not name its marker" in found[0]["problem"]
    assert "write_drain_request() takes" in found[1]["problem"]
    assert found[2]["hermes_version"] == "0.24.1" and "SIGUSR1" in found[2]["fallback"]
    assert not (tmp_path / ".drain_request.json").exists()


# -- launch -------------------------------------------------------------------------------------


def test_the_gateway_launch_contract_is_checked_by_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert check_launch().ok and events(capsys) == []
    assert not check_launch("0.30.0").ok
    (event,) = events(capsys)
    assert event["event"] == "hermes.compat.degraded" and "starts anyway" in event["fallback"]


# -- state.db -----------------------------------------------------------------------------------


def test_the_installed_hermes_state_db_has_the_columns_the_import_reads(tmp_path: Path) -> None:
    from hermes_state import SessionDB

    SessionDB(tmp_path / "state.db").close()
    conn = apsw.Connection(str(tmp_path / "state.db"))
    columns = [row[1] for row in conn.execute("PRAGMA table_info(messages)")]
    conn.close()
    assert set(columns) >= READ_COLUMNS
    assert check_state_db(columns).ok
    missing = check_state_db([c for c in columns if c not in ("tool_name", "timestamp")])
    assert missing.problem == "messages lacks timestamp, tool_name"

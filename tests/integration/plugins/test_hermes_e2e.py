"""End to end with the real Hermes 0.19.0: discovery through the link, reload on a new commit."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from plugins_testlib import (
    SupervisedGateway,
    hermes_discover,
    plugin_files,
    read_loads,
    write_hermes_config,
    write_spec,
)
from support.wait import wait_until

from hermes_runtime.agent import GatewayRestarter
from hermes_runtime.agent.restart import STATUS_FILE, gateway_pid
from hermes_runtime.common.errors import RuntimeFailure
from hermes_runtime.plugins import LinkReport, link_plugins, watch_links


def gateway_state(data_dir: Path) -> str | None:
    try:
        return json.loads((data_dir / STATUS_FILE).read_text()).get("gateway_state")
    except (OSError, ValueError):
        return None


def test_hermes_discovers_the_linked_plugin_once_and_runs_new_commit(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    write_hermes_config(data_dir)
    synced = synced_plugin("weather", version="1")
    synced.repo.commit(plugin_files("weather", "1b"))
    synced.sync()
    assert len(list((synced.root / ".worktrees").iterdir())) == 2
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "weather"}])
    assert link_plugins(data_dir, spec).ok

    discovered = hermes_discover(data_dir)
    weather = [p for p in discovered if p["name"] == "weather"]
    assert len(weather) == 1, discovered
    assert weather[0]["key"] == "weather" and weather[0]["enabled"] is True
    assert weather[0]["error"] is None
    assert all(
        ".worktrees" not in str(p["key"]) and "current" not in str(p["key"]) for p in discovered
    )
    assert [(n, v) for n, v, _ in read_loads(data_dir)] == [("weather", "1b")]

    # git-sync swapped `current`; a gateway starting before the check loads the checked commit.
    synced.repo.commit(plugin_files("weather", "2"))
    synced.sync()
    hermes_discover(data_dir)
    assert [(n, v) for n, v, _ in read_loads(data_dir)] == [("weather", "1b")] * 2
    assert link_plugins(data_dir, spec).ok
    hermes_discover(data_dir)
    assert [(n, v) for n, v, _ in read_loads(data_dir)] == [("weather", "1b")] * 2 + [
        ("weather", "2")
    ]


def test_gateway_start_after_git_sync_deleted_the_old_worktree_runs_without_the_plugin(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    """git-sync deletes the previous worktree right after its swap: until the new commit is
    checked, Hermes finds a dangling link and skips the plugin (no error, no unchecked code)."""
    write_hermes_config(data_dir)
    synced = synced_plugin("weather", version="1")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "weather"}])
    assert link_plugins(data_dir, spec).ok
    synced.repo.commit(plugin_files("weather", "2"))
    synced.sync(remove_old=True)
    assert [p for p in hermes_discover(data_dir) if p["name"] == "weather"] == []
    assert read_loads(data_dir) == []
    assert link_plugins(data_dir, spec).ok
    [weather] = [p for p in hermes_discover(data_dir) if p["name"] == "weather"]
    assert weather["error"] is None
    assert [(n, v) for n, v, _ in read_loads(data_dir)] == [("weather", "2")]


def test_disabled_plugin_is_linked_but_not_loaded(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    write_hermes_config(data_dir)
    synced_plugin("quiet")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "quiet", "enabled": False}])
    assert link_plugins(data_dir, spec).ok
    [quiet] = [p for p in hermes_discover(data_dir) if p["name"] == "quiet"]
    assert quiet["enabled"] is False
    assert read_loads(data_dir) == []


def test_watch_restarts_the_gateway_onto_the_new_commit(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    write_hermes_config(data_dir)
    synced = synced_plugin("weather", version="1")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "weather"}])
    baseline = link_plugins(data_dir, spec)
    assert baseline.ok
    gateway = SupervisedGateway(data_dir, tmp_path / "gateway.log").start()
    stop = threading.Event()
    restarter = GatewayRestarter(data_dir, pid=gateway.pid, max_defer_seconds=30)
    seen: list[LinkReport] = []

    def on_change(report: LinkReport) -> None:
        seen.append(report)
        restarter(report)

    watcher = threading.Thread(
        target=watch_links,
        args=(data_dir, spec, on_change, stop),
        kwargs={"interval": 0.2, "baseline": baseline},
    )
    try:
        wait_until(lambda: gateway.healthy() and read_loads(data_dir), 90, "gateway start")
        first_pid = gateway.pid()
        assert [(n, v) for n, v, _ in read_loads(data_dir)] == [("weather", "1")]
        watcher.start()
        time.sleep(1.0)
        assert seen == [], "a steady state must not restart the gateway"

        synced.repo.commit(plugin_files("weather", "2"))
        new_sha = synced.sync()
        wait_until(lambda: any(v == "2" for _, v, _ in read_loads(data_dir)), 90, "new code")
        wait_until(gateway.healthy, 60, "gateway back")
        assert gateway.exit_codes[:1] == [75]
        assert gateway.pid() != first_pid
        [report] = seen
        assert report.commits() == {"weather": new_sha}
        loads = read_loads(data_dir)
        assert [v for _, v, _ in loads] == ["1", "2"]
        assert loads[-1][2] != loads[0][2]
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join(timeout=10)
        gateway.stop()


def test_gateway_pid_file_must_name_a_hermes_gateway(data_dir: Path, tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        (data_dir / "gateway.pid").write_text(f'{{"pid": {sleeper.pid}}}')
        with pytest.raises(RuntimeFailure, match="is not a Hermes gateway"):
            gateway_pid(data_dir)
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
    (data_dir / "gateway.pid").write_text("not json")
    with pytest.raises(RuntimeFailure, match="no PID"):
        gateway_pid(data_dir)
    assert os.path.exists(data_dir / "gateway.pid")


def test_reload_waits_for_the_in_flight_turn(
    data_dir: Path, synced_plugin, tmp_path: Path, fake_llm
) -> None:
    """A new commit during a chat turn: the turn finishes normally, then the gateway restarts."""
    write_hermes_config(data_dir, fake_llm.base_url)
    synced = synced_plugin("weather", version="1")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "weather"}])
    baseline = link_plugins(data_dir, spec)
    gateway = SupervisedGateway(data_dir, tmp_path / "gateway.log").start()
    restarter = GatewayRestarter(data_dir, pid=gateway.pid, max_defer_seconds=60)
    stop = threading.Event()
    watcher = threading.Thread(
        target=watch_links,
        args=(data_dir, spec, restarter, stop),
        kwargs={"interval": 0.2, "baseline": baseline},
    )
    answers: list[tuple[int, str, float]] = []

    def chat() -> None:
        status, text = gateway.chat("hello during a reload")
        answers.append((status, text, time.time()))

    try:
        wait_until(lambda: gateway.healthy() and read_loads(data_dir), 90, "gateway start")
        watcher.start()
        fake_llm.set_mode("hang", hang_seconds=8)
        talker = threading.Thread(target=chat)
        talker.start()
        wait_until(lambda: len(fake_llm.requests()) > 0, 60, "turn in flight")
        synced.repo.commit(plugin_files("weather", "2"))
        synced.sync()
        wait_until(lambda: gateway_state(data_dir) == "draining", 30, "drain engaged")
        refused_status, _ = gateway.chat("a new turn while draining")
        talker.join(timeout=120)
        wait_until(lambda: any(v == "2" for _, v, _ in read_loads(data_dir)), 90, "new code")
        [(status, text, answered_at)] = answers
        assert status == 200, text
        assert "Echo: hello during a reload" in text
        assert refused_status == 503, "new turns must be refused (retryable) while draining"
        [restart_at] = restarter.restarts
        assert restart_at >= answered_at - 0.5, "the gateway was signalled mid-turn"
        assert not (data_dir / ".drain_request.json").exists()
        wait_until(lambda: gateway_state(data_dir) == "running", 60, "new gateway accepting turns")
        status, text = gateway.chat("after the reload")
        assert status == 200 and "Echo: after the reload" in text
    finally:
        stop.set()
        if watcher.is_alive():
            watcher.join(timeout=10)
        gateway.stop()

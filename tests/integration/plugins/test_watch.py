"""``watch_links`` and ``plugins watch``: re-converge on changes, callback only on a real change."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from plugins_testlib import plugin_files, write_spec
from support.wait import wait_until

from hermes_runtime.plugins import LinkReport, link_plugins, watch_links


class Watching:
    def __init__(self, data_dir: Path, spec: Path, baseline: LinkReport | None) -> None:
        self.calls: list[LinkReport] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=watch_links,
            args=(data_dir, spec, self.calls.append, self.stop),
            kwargs={"interval": 0.05, "baseline": baseline},
        )

    def __enter__(self) -> Watching:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


def test_new_commit_calls_back_once_and_steady_state_never(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced = synced_plugin("w")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "w"}])
    baseline = link_plugins(data_dir, spec)
    with Watching(data_dir, spec, baseline) as watching:
        time.sleep(0.5)
        assert watching.calls == []
        synced.repo.commit(plugin_files("w", "2"))
        sha = synced.sync()
        wait_until(lambda: len(watching.calls) == 1)
        assert watching.calls[0].commits() == {"w": sha}
        time.sleep(0.5)
        assert len(watching.calls) == 1


def test_spec_change_links_new_plugin_and_removes_old(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced_plugin("old")
    synced_plugin("new")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "old"}])
    baseline = link_plugins(data_dir, spec)
    with Watching(data_dir, spec, baseline) as watching:
        write_spec(spec, [{"name": "new"}])
        wait_until(lambda: len(watching.calls) == 1)
    assert (data_dir / "plugins" / "new").is_symlink()
    assert not os.path.lexists(data_dir / "plugins" / "old")


def test_broken_commit_does_not_restart_and_bad_spec_keeps_links(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced = synced_plugin("w")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "w"}])
    baseline = link_plugins(data_dir, spec)
    with Watching(data_dir, spec, baseline) as watching:
        synced.repo.commit({}, remove=("plugin.yaml",))
        synced.sync()
        spec.write_text("plugins: [unclosed\n")
        time.sleep(0.8)
        assert watching.calls == []
        assert (data_dir / "plugins" / "w").is_symlink()


def test_every_convergence_is_reported_a_broken_commit_too(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    """``on_report`` hears of the broken commit that ``on_change`` never does: the agent's
    hermes_runtime_plugin_linked turns 0 (HermesPluginSyncStale)."""
    synced = synced_plugin("w")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "w"}])
    baseline = link_plugins(data_dir, spec)
    changes: list[LinkReport] = []
    reports: list[LinkReport] = []
    stop = threading.Event()
    thread = threading.Thread(
        target=watch_links,
        args=(data_dir, spec, changes.append, stop),
        kwargs={"interval": 0.05, "baseline": baseline, "on_report": reports.append},
    )
    thread.start()
    try:
        synced.repo.commit({}, remove=("plugin.yaml",))
        synced.sync()
        wait_until(lambda: any(not r.ok for r in reports))
    finally:
        stop.set()
        thread.join(timeout=10)
    assert changes == []
    (failed,) = [r for r in reports if not r.ok]
    assert [f.name for f in failed.failures] == ["w"]


def test_first_sync_after_start_is_linked(data_dir: Path, synced_plugin, tmp_path: Path) -> None:
    synced = synced_plugin("late", sync=False)
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "late"}])
    baseline = link_plugins(data_dir, spec)
    assert not baseline.ok
    with Watching(data_dir, spec, baseline) as watching:
        synced.sync()
        wait_until(lambda: len(watching.calls) == 1)
    assert (data_dir / "plugins" / "late" / "plugin.yaml").is_file()


def test_cli_watch_relinks_and_stops_on_sigterm(
    data_dir: Path, synced_plugin, tmp_path: Path
) -> None:
    synced_plugin("a")
    synced_plugin("b")
    spec = write_spec(tmp_path / "plugins.yaml", [{"name": "a"}])
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hermes_runtime",
            "plugins",
            "watch",
            "--data-dir",
            str(data_dir),
            "--spec",
            str(spec),
            "--interval",
            "0.1",
            "--no-restart",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: (data_dir / "plugins" / "a").is_symlink())
        write_spec(spec, [{"name": "a"}, {"name": "b"}])
        wait_until(lambda: (data_dir / "plugins" / "b").is_symlink())
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "linked    b" in out

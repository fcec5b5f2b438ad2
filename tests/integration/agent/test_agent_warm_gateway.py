"""The warm gateway's default preload against the real Hermes: it may not touch the data dir.

The launcher (hermes_runtime/agent/zygote.py) imports its preload list before the entrypoint
holds the data dir lock. If a pinned library started reading or writing ``HERMES_HOME`` or
``$HOME`` when imported, the launcher's guard would refuse it and fall back to a cold start,
silently losing the warm hand-over; this test says so instead.
"""

from __future__ import annotations

import os
from pathlib import Path

from support.wait import wait_until

from hermes_runtime.agent.gateway import gateway_command
from hermes_runtime.agent.settings import DEFAULT_PRELOAD
from hermes_runtime.agent.zygote import start_zygote


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and mtime (ns)."""
    found = {}
    for path in sorted(root.rglob("*")):
        stat = path.lstat()
        found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


def test_the_default_preload_imports_without_touching_the_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "home").mkdir(parents=True)
    (data / "config.yaml").write_text("model:\n  provider: custom\n")
    (data / ".env").write_text("EXAMPLE=1\n")
    before = tree(data)
    env = {**os.environ, "HERMES_HOME": str(data), "HOME": str(data / "home")}
    zygote = start_zygote(gateway_command(), env, DEFAULT_PRELOAD, cwd=data)
    try:
        wait_until(zygote.warm, 120, "the warm gateway's preload")
        assert zygote.proc.poll() is None, "the launcher died while preloading"
        report = zygote.report
        assert report is not None and report["warm"] is True
        assert report["touched"] == [], f"a preloaded library touched the data dir: {report}"
        assert report["failed"] == [], f"preload modules that do not import: {report}"
        assert tree(data) == before
    finally:
        zygote.discard()
    assert zygote.proc.returncode == 0  # no "go": it exits without running the gateway
    assert tree(data) == before

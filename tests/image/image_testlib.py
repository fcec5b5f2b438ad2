"""Helpers for the image tests: docker calls, and the agent tests' git-sync layout builder."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def docker(
    *args: str, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["docker", *args], capture_output=True, text=True, check=False, timeout=timeout
    )
    if check:
        assert result.returncode == 0, f"docker {' '.join(args)}:\n{result.stderr[-3000:]}"
    return result


def _load_agent_testlib():  # type: ignore[no-untyped-def]
    """One copy of the plugin-layout helpers, shared with tests/integration/agent."""
    path = REPO / "tests" / "integration" / "agent" / "agent_testlib.py"
    spec = importlib.util.spec_from_file_location("agent_testlib_for_images", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_lib = _load_agent_testlib()
git_synced_plugin = _lib.git_synced_plugin
free_port = _lib.free_port
wait_until = _lib.wait_until

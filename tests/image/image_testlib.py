"""Helpers for the image tests: docker calls (git-sync layouts: ``support.git_sync``)."""

from __future__ import annotations

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

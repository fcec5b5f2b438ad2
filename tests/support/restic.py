"""The pinned restic (v0.18.1, built by ci/install-tools.sh) for every test that backs up.

Debian's restic 0.14 may be on PATH too; the backup code would take it, so tests name
the pinned one explicitly through ``HERMES_RUNTIME_RESTIC`` (what the CLI reads).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PINNED_RESTIC = REPO / ".cache" / "tools" / "bin" / "restic"
TEST_PASSWORD = "correct horse battery staple"


def pinned_restic() -> Path:
    """The pinned binary, built on first use (ci/install-tools.sh is idempotent)."""
    if not PINNED_RESTIC.exists():
        subprocess.run(
            [str(REPO / "ci" / "install-tools.sh"), str(PINNED_RESTIC.parents[1])], check=True
        )
    assert PINNED_RESTIC.exists(), f"{PINNED_RESTIC} missing after ci/install-tools.sh"
    return PINNED_RESTIC


def restic_env() -> dict[str, str]:
    """Environment for a CLI run that backs up: the pinned restic and a repository password."""
    return {"HERMES_RUNTIME_RESTIC": str(pinned_restic()), "RESTIC_PASSWORD": TEST_PASSWORD}

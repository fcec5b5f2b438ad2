"""The pinned restic (v0.19.1, what the agent image carries) for every test that backs up.

Built from the Go module proxy on first use into ``.cache/tools/restic-v0.19.1/restic``
(``go install``: go checks the module and every dependency against restic's go.sum and the
checksum database), once per machine; a versioned folder, so an older build elsewhere (Debian's
0.14, ci/install-tools.sh's) is never taken by mistake. The backup code would take whatever
restic is on PATH, so tests name this one explicitly through ``HERMES_RUNTIME_RESTIC`` (what
the CLI reads).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESTIC_VERSION = "v0.19.1"
RESTIC_MODULE = f"github.com/restic/restic/cmd/restic@{RESTIC_VERSION}"
PINNED_RESTIC = REPO / ".cache" / "tools" / f"restic-{RESTIC_VERSION}" / "restic"
TEST_PASSWORD = "correct horse battery staple"


def pinned_restic() -> Path:
    """The pinned binary, built on first use (one build at a time: test workers share it)."""
    PINNED_RESTIC.parent.mkdir(parents=True, exist_ok=True)
    with (PINNED_RESTIC.parent / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not PINNED_RESTIC.exists():
            _build()
    version = subprocess.run(
        [str(PINNED_RESTIC), "version"], capture_output=True, text=True, check=True
    ).stdout
    assert version.startswith(f"restic {RESTIC_VERSION[1:]} "), f"{PINNED_RESTIC}: {version}"
    return PINNED_RESTIC


def _build() -> None:
    go = shutil.which("go")
    assert go, f"no go on PATH: the tests build restic {RESTIC_VERSION} with it"
    with tempfile.TemporaryDirectory(dir=PINNED_RESTIC.parent) as gobin:
        env = {**os.environ, "CGO_ENABLED": "0", "GOBIN": gobin, "GOFLAGS": "-modcacherw"}
        subprocess.run(
            [go, "install", "-trimpath", "-ldflags=-s", RESTIC_MODULE], env=env, check=True
        )
        os.replace(Path(gobin) / "restic", PINNED_RESTIC)


def restic_env() -> dict[str, str]:
    """Environment for a CLI run that backs up: the pinned restic and a repository password."""
    return {"HERMES_RUNTIME_RESTIC": str(pinned_restic()), "RESTIC_PASSWORD": TEST_PASSWORD}

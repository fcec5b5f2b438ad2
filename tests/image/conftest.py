"""Image tests: build with ci/build-images.sh (no registry), run with Docker.

The session fixture runs the real build script, so a cold run builds the base image and the
agent image (minutes); a warm run is Docker's layer cache (seconds).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
# What ci/build-images.sh tags the agent with: the chart's appVersion.
APP_VERSION = yaml.safe_load((REPO / "charts" / "hermes-agent" / "Chart.yaml").read_text())[
    "appVersion"
]
AGENT_IMAGE = f"hermes-runtime/agent:{APP_VERSION}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.image)


@pytest.fixture(scope="session")
def agent_image() -> str:
    """Build (or reuse from cache) the agent image; a failed build fails loudly."""
    result = subprocess.run(
        [str(REPO / "ci" / "build-images.sh"), "agent"],
        env={**os.environ, "NO_PUSH": "1"},
        capture_output=True,
        text=True,
        check=False,
        timeout=3000,
    )
    assert result.returncode == 0, f"ci/build-images.sh agent failed:\n{result.stderr[-5000:]}"
    return AGENT_IMAGE


AUX_IMAGES = {
    "git-server": "hermes-runtime/git-server:dev",
    "fake-llm": "hermes-runtime/fake-llm:dev",
    "seaweedfs": "hermes-runtime/seaweedfs:dev",
    "openbao": "hermes-runtime/openbao:dev",
    "busybox": "hermes-runtime/busybox:dev",
}


@pytest.fixture(scope="session")
def aux_images() -> dict[str, str]:
    """The auxiliary test images (git-sync needs the Go proxy to serve k8s.io/git-sync: its
    build belongs to ci/build-git-sync.sh and is not exercised here)."""
    result = subprocess.run(
        [str(REPO / "ci" / "build-images.sh"), *AUX_IMAGES],
        env={**os.environ, "NO_PUSH": "1"},
        capture_output=True,
        text=True,
        check=False,
        timeout=3000,
    )
    assert result.returncode == 0, f"ci/build-images.sh failed:\n{result.stderr[-5000:]}"
    return AUX_IMAGES

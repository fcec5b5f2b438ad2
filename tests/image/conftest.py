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


AGENT_ON_UPSTREAM_IMAGE = f"hermes-runtime/agent-on-upstream:{APP_VERSION}"


def build_image(name: str) -> None:
    """Build (or reuse from cache) image ``name`` with ci/build-images.sh; a failed build fails
    loudly, with the script's log."""
    result = subprocess.run(
        [str(REPO / "ci" / "build-images.sh"), name],
        env={**os.environ, "NO_PUSH": "1"},
        capture_output=True,
        text=True,
        check=False,
        timeout=3000,
    )
    assert result.returncode == 0, f"ci/build-images.sh {name} failed:\n{result.stderr[-5000:]}"


@pytest.fixture(scope="session")
def agent_image() -> str:
    """The agent image (the Dockerfile's)."""
    build_image("agent")
    return AGENT_IMAGE


@pytest.fixture(scope="session")
def agent_on_upstream_image() -> str:
    """The agent layered onto upstream's Hermes image (Dockerfile.upstream), here on the
    stand-in base ci/build-images.sh builds where upstream's image cannot be pulled."""
    build_image("agent-on-upstream")
    return AGENT_ON_UPSTREAM_IMAGE


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

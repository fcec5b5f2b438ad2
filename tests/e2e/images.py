"""The images the e2e suite installs, as a user's cluster pulls them: from a registry.

`ci/build-images.sh` pushes every image it builds to the registry that `HERMES_E2E_REGISTRY`
names (default `localhost:5001`: the local registry `make cluster` starts, which every node of
the test cluster reaches). Charts get full references and `imagePullPolicy: Always` (a rebuilt
`:dev` tag is pulled again; against a local registry that costs one manifest request), so
nothing is imported into a node and nothing relies on `Never`.

Checking the registry first turns "pod stuck in ErrImagePull" into a one-line failure that
says what to build.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import httpx

DEFAULT_REGISTRY = "localhost:5001"
REGISTRY = os.environ.get("HERMES_E2E_REGISTRY", DEFAULT_REGISTRY)
CI_VALUES_FILE = Path(__file__).resolve().parents[2] / "values-examples" / "ci.yaml"
PULL_POLICY = "Always"
# The agent is tagged with the chart's appVersion, as `make image` tags it.
AGENT_TAG = "0.1.0"
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)


def tag_of(name: str) -> str:
    return AGENT_TAG if name == "agent" else "dev"


def repository(name: str) -> str:
    """`hermes-runtime/<name>`, the repository inside the registry."""
    return f"hermes-runtime/{name}"


def ref(name: str) -> str:
    """Full reference, e.g. localhost:5001/hermes-runtime/agent:0.1.0."""
    return f"{REGISTRY}/{repository(name)}:{tag_of(name)}"


def agent_values() -> dict[str, object]:
    """The chart's `image` values for the agent image in the registry."""
    return {
        "image": {
            "registry": REGISTRY,
            "repository": repository("agent"),
            "tag": AGENT_TAG,
            "pullPolicy": PULL_POLICY,
        }
    }


@functools.cache  # one copy per run, however many test modules ask
def ci_values() -> Path:
    """values-examples/ci.yaml, pulling from REGISTRY.

    The file names the registry `make cluster` starts; with another HERMES_E2E_REGISTRY (a
    branch's own path, say localhost:5001/mine) the suite installs a copy that names it, so
    the images under test are the ones that were pushed there.
    """
    if REGISTRY == DEFAULT_REGISTRY:
        return CI_VALUES_FILE
    text = CI_VALUES_FILE.read_text(encoding="utf-8")
    rewritten = text.replace(f"registry: {DEFAULT_REGISTRY}", f"registry: {REGISTRY}")
    target = Path(tempfile.gettempdir()) / f"hermes-e2e-ci-{REGISTRY.replace('/', '_')}.yaml"
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(rewritten, encoding="utf-8")
    partial.replace(target)
    return target


def missing(names: list[str]) -> list[str]:
    """References of `names` the registry does not serve (asked over its v2 API)."""
    absent = []
    with httpx.Client(timeout=10) as http:
        for name in names:
            host, _, path = REGISTRY.partition("/")  # a registry may carry a path: host/team
            prefix = f"{path}/" if path else ""
            url = f"http://{host}/v2/{prefix}{repository(name)}/manifests/{tag_of(name)}"
            try:
                answer = http.head(url, headers={"Accept": MANIFEST_TYPES})
            except httpx.HTTPError as exc:
                raise RuntimeError(
                    f"registry {REGISTRY} does not answer ({exc}): run `make cluster`"
                ) from exc
            if answer.status_code != 200:
                absent.append(ref(name))
    return absent


def require(names: list[str]) -> None:
    """Fail in seconds, naming what to build, when an image is not in the registry."""
    absent = missing(names)
    assert not absent, f"images not in registry {REGISTRY}: {absent} (run ci/build-images.sh)"

"""Dockerfile.upstream: hermes-runtime layered onto upstream's Hermes image leaves Hermes as
upstream built it. Here the base is the stand-in ci/build-images.sh builds (Python 3.14, a
venv at /opt/hermes/.venv), as upstream's image cannot be pulled; the behaviour every agent
image must have is tested on this image too, in test_agent_image.py.
"""

from __future__ import annotations

import json

from image_testlib import docker

STANDIN = "hermes-runtime/hermes-standin:dev"
UPSTREAM_VENV = "/opt/hermes/.venv"
PTH = "zz-hermes-runtime.pth"


def _venv_files(image: str) -> set[str]:
    listing = docker(
        "run", "--rm", "--user", "0", "--entrypoint", "find", image, UPSTREAM_VENV, "-print"
    ).stdout
    return set(listing.split())


def test_the_layer_adds_one_path_file_to_upstreams_venv_and_changes_nothing_else(
    agent_on_upstream_image: str,
) -> None:
    added = _venv_files(agent_on_upstream_image) - _venv_files(STANDIN)
    removed = _venv_files(STANDIN) - _venv_files(agent_on_upstream_image)
    assert not removed, sorted(removed)[:20]
    assert [path.rsplit("/", 1)[-1] for path in added] == [PTH], sorted(added)[:20]


def test_hermes_keeps_upstreams_packages_and_the_runtime_fills_in_the_rest(
    agent_on_upstream_image: str,
) -> None:
    """A package both ship comes from upstream's venv (the runtime's copy is appended after
    it); one only the runtime needs comes from /opt/hermes-runtime/site."""
    probe = (
        "import json, sys, pydantic, apsw, hermes_cli, hermes_runtime;"
        "print(json.dumps({'python': list(sys.version_info[:2]),"
        " 'pydantic': pydantic.__file__, 'apsw': apsw.__file__,"
        " 'hermes_cli': hermes_cli.__file__, 'hermes_runtime': hermes_runtime.__file__}))"
    )
    found = json.loads(
        docker("run", "--rm", "--read-only", agent_on_upstream_image, "python", "-c", probe).stdout
    )
    assert found["python"] == [3, 14], found
    assert found["hermes_cli"].startswith(f"{UPSTREAM_VENV}/"), found
    assert found["pydantic"].startswith(f"{UPSTREAM_VENV}/"), found
    assert found["apsw"].startswith("/opt/hermes-runtime/site/"), found
    assert found["hermes_runtime"].startswith("/opt/hermes-runtime/app/"), found


def test_the_image_runs_as_the_upstream_user_under_catatonit(agent_on_upstream_image: str) -> None:
    config = json.loads(
        docker("image", "inspect", "-f", "{{json .Config}}", agent_on_upstream_image).stdout
    )
    assert config["User"] == "10000:10000"
    assert config["Entrypoint"] == ["/usr/bin/catatonit", "--"]
    assert config["Cmd"] == ["hermes-runtime", "agent", "run"]
    passwd = docker("run", "--rm", agent_on_upstream_image, "getent", "passwd", "10000").stdout
    assert passwd.split(":")[0] == "hermes", passwd  # upstream's user, not a second one

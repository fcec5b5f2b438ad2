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


def _environment(image: str) -> dict[str, str]:
    found = json.loads(docker("image", "inspect", "--format", "{{json .Config.Env}}", image).stdout)
    return dict(entry.split("=", 1) for entry in found)


def test_both_agent_images_set_the_same_runtime_environment(
    agent_image: str, agent_on_upstream_image: str
) -> None:
    """Dockerfile and Dockerfile.upstream each write the runtime's ENV block (Docker has no
    include): what the runtime reads from it must agree, only the venv's paths may differ."""
    ours, upstream = _environment(agent_image), _environment(agent_on_upstream_image)
    runtime = {"HERMES_HOME", "HOME", "OPENBLAS_NUM_THREADS", "LANG"}
    names = {n for n in ours if n.startswith("HERMES_RUNTIME_") or n in runtime}
    assert names >= {"HERMES_HOME", "HERMES_RUNTIME_MODEL_CACHE", "OPENBLAS_NUM_THREADS"}
    assert {n: ours[n] for n in names} == {n: upstream.get(n) for n in names}
    for name in ("HERMES_", "OPENBLAS_"):
        extra = {n for n in upstream if n.startswith(name)} - names - {"HERMES_VENV"}
        assert not extra, f"set in Dockerfile.upstream only: {sorted(extra)}"

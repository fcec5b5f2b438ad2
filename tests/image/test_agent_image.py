"""The built agent images: non-root, SQLite >= 3.51.3 for Hermes, seeding, linking, a real run.

Every test runs on both images users can deploy: the Dockerfile's (Hermes 0.19.0 from the
lock, Python 3.11) and Dockerfile.upstream's (hermes-runtime layered onto upstream's Hermes
image, here its Python 3.14 stand-in). Containers run the way the chart runs them: read-only
root filesystem, all capabilities dropped, no privilege escalation, the data dir as a volume
(here a scratch host directory).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from image_testlib import REPO, docker
from support.git_sync import git_synced_plugin
from support.net import free_port
from support.wait import wait_until

UID = 10000
API_KEY = "image-test-key-0123456789abcdef"
RESTRICTED = ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
RESTRICTED += ["--tmpfs", "/tmp:rw,size=64m", "--user", f"{UID}:{UID}"]


# Where each image's Hermes lives: the lock's venv, or upstream's venv left as upstream built it.
HERMES_VENV = {"agent": "/opt/hermes-runtime/venv/", "agent-on-upstream": "/opt/hermes/.venv/"}


@pytest.fixture(params=sorted(HERMES_VENV))
def image_variant(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def agent_image(image_variant: str, request: pytest.FixtureRequest) -> str:
    """The image of ``image_variant``, built once per session (tests/image/conftest.py)."""
    fixture = {"agent": "agent_image", "agent-on-upstream": "agent_on_upstream_image"}
    return str(request.getfixturevalue(fixture[image_variant]))


def run_in_image(image: str, *command: str, mounts: tuple[str, ...] = ()) -> str:
    volumes = [arg for mount in mounts for arg in ("-v", mount)]
    return docker("run", "--rm", *RESTRICTED, *volumes, image, *command).stdout


@pytest.fixture
def data_volume(tmp_path: Path) -> Path:
    """A scratch data dir owned by the image's user, as an fsGroup'd PVC would be."""
    data = tmp_path / "data"
    data.mkdir()
    os.chown(data, UID, UID)
    return data


def chown_tree(path: Path) -> None:
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), UID, UID)
    os.lchown(path, UID, UID)


def test_runs_as_uid_and_gid_10000_by_default(agent_image: str) -> None:
    out = docker("run", "--rm", agent_image, "sh", "-c", "id -u; id -g; echo $HERMES_HOME").stdout
    assert out.split() == ["10000", "10000", "/opt/data"]
    user = docker("image", "inspect", "-f", "{{.Config.User}}", agent_image).stdout.strip()
    assert user == "10000:10000"  # numeric, so runAsNonRoot can verify it


def test_hermes_version_is_the_pinned_one(agent_image: str) -> None:
    out = run_in_image(agent_image, "hermes", "--version")
    assert "Hermes Agent v0.19.0" in out


def test_hermes_runtime_is_installed_with_its_hermes_plugin_entry_point(agent_image: str) -> None:
    probe = (
        "from importlib.metadata import entry_points;"
        "print([e.value for e in entry_points(group='hermes_agent.plugins')])"
    )
    out = run_in_image(agent_image, "python", "-c", probe)
    assert "hermes_runtime.lcm.host.hermes_plugin" in out
    assert run_in_image(agent_image, "hermes-runtime", "--version").startswith("hermes-runtime ")


def test_the_image_carries_the_pinned_restic(agent_image: str) -> None:
    """`backup` hands its staged tree to restic: v0.19.1 built from the Go module proxy."""
    assert run_in_image(agent_image, "restic", "version").startswith("restic 0.19.1 ")


def test_the_e5_graph_is_built_into_the_image(agent_image: str) -> None:
    """LCM's e5 graph for both weight widths sits in the image's read-only model cache: no
    pod builds it (~3 s of CPU) into its data volume, and an embed runs with a read-only
    root and no writable home."""
    probe = (
        "from hermes_runtime.lcm.embed.e5onnx import cached_model_path\n"
        "from hermes_runtime.common.modelcache import model_cache_dir\n"
        "import os, sys\n"
        "cache = model_cache_dir(os.environ)\n"
        "files = [cached_model_path(b, cache) for b in (8, 7)]\n"
        "missing = [str(f) for f in files if not f.is_file()]\n"
        "sys.exit(f'missing: {missing}' if missing else 0)\n"
    )
    run_in_image(agent_image, "python3", "-c", probe)
    embed = (
        "from hermes_runtime.lcm.embed.embedders import offline_embedder\n"
        "print(offline_embedder('e5').embed(['a harbour at dawn']).shape)\n"
    )
    assert run_in_image(agent_image, "python3", "-c", embed).strip() == "(1, 384)"


def test_every_sqlite_in_the_image_is_at_least_3_51_3(agent_image: str, image_variant: str) -> None:
    """Hermes opens state.db with the stdlib sqlite3 module; LCM and backup use apsw."""
    probe = (
        "import json, sqlite3, apsw, hermes_state;"
        "c = sqlite3.connect(':memory:');"
        "print(json.dumps({'module': sqlite3.sqlite_version,"
        " 'connection': c.execute('select sqlite_version()').fetchone()[0],"
        " 'apsw': apsw.sqlite_lib_version(), 'hermes_state': hermes_state.__file__}))"
    )
    versions = json.loads(run_in_image(agent_image, "python", "-c", probe))
    for key in ("module", "connection", "apsw"):
        parts = tuple(int(p) for p in versions[key].split("."))
        assert parts >= (3, 51, 3), versions
    assert versions["hermes_state"].startswith(HERMES_VENV[image_variant]), versions


def test_prepare_seeds_config_and_keeps_user_edits_across_starts(
    agent_image: str, data_volume: Path, tmp_path: Path
) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "config.yaml").write_text("model:\n  default: chart-model\nagent:\n  max_turns: 5\n")
    (etc / "SOUL.md").write_text("Chart soul.\n")
    mounts = (f"{data_volume}:/opt/data", f"{etc}:/etc/hermes-runtime:ro")
    run_in_image(agent_image, "hermes-runtime", "agent", "prepare", mounts=mounts)
    config = data_volume / "config.yaml"
    assert config.read_text() == (etc / "config.yaml").read_text()
    assert config.stat().st_uid == UID
    # The user edits a key; the chart changes the same key and another one.
    config.write_text(config.read_text().replace("max_turns: 5", "max_turns: 77"))
    (etc / "config.yaml").write_text("model:\n  default: new-model\nagent:\n  max_turns: 6\n")
    out = run_in_image(agent_image, "hermes-runtime", "agent", "prepare", "--json", mounts=mounts)
    report = json.loads(out)
    assert report["config"]["applied_keys"] == ["model.default"]
    assert report["config"]["kept_user_keys"] == ["agent.max_turns"]
    text = config.read_text()
    assert "default: new-model" in text
    assert "max_turns: 77" in text
    assert (data_volume / "SOUL.md").read_text() == "Chart soul.\n"


def test_prepare_links_plugins_on_a_scratch_volume(
    agent_image: str, data_volume: Path, tmp_path: Path
) -> None:
    sha = git_synced_plugin(data_volume, "weather", tmp_path)
    chown_tree(data_volume)
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "plugins.yaml").write_text("plugins:\n- name: weather\n  subPath: ''\n  enabled: true\n")
    mounts = (f"{data_volume}:/opt/data", f"{etc}:/etc/hermes-runtime:ro")
    out = run_in_image(
        agent_image, "hermes-runtime", "agent", "prepare", "--json", "--strict", mounts=mounts
    )
    report = json.loads(out)
    assert report["ok"] is True
    [result] = report["plugins"]["results"]
    assert (result["name"], result["commit"]) == ("weather", sha)
    link = data_volume / "plugins" / "weather"
    assert os.readlink(link) == f"../.git-sync/weather/.worktrees/{sha}"
    assert (link / "plugin.yaml").exists()


@pytest.fixture
def fake_llm() -> Iterator[int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests/fakes/openai_server.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    yield port
    proc.terminate()
    proc.wait(10)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param((), id="image-cmd"),  # catatonit -- hermes-runtime agent run
        # The chart sets args only (the CMD), so catatonit stays PID 1 there too.
        pytest.param(("hermes-runtime", "agent", "run"), id="chart-args"),
    ],
)
def test_agent_run_serves_health_and_stops_gracefully_under_restricted_settings(
    agent_image: str, data_volume: Path, tmp_path: Path, fake_llm: int, command: tuple[str, ...]
) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "config.yaml").write_text(
        "model:\n  provider: custom\n"
        f"  base_url: http://127.0.0.1:{fake_llm}/v1\n  default: fake-model\n  api_key: x\n"
    )
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "env").write_text(f"API_SERVER_KEY={API_KEY}\n")
    shutil.chown(secrets / "env", UID, UID)
    (secrets / "env").chmod(0o600)
    api_port, metrics_port = free_port(), free_port()
    name = f"hermes-image-test-{os.getpid()}"
    docker(
        "run", "-d", "--name", name, "--network", "host", *RESTRICTED,
        "-v", f"{data_volume}:/opt/data", "-v", f"{etc}:/etc/hermes-runtime:ro",
        "-v", f"{secrets}:/run/hermes/secrets:ro",
        "-e", "HERMES_RUNTIME_SECRETS_ENV=/run/hermes/secrets/env",
        "-e", f"API_SERVER_PORT={api_port}", "-e", f"HERMES_RUNTIME_METRICS_PORT={metrics_port}",
        "-e", f"HERMES_RUNTIME_GATEWAY_PORT={free_port()}",  # host network: no fixed port
        agent_image, *command,
    )  # fmt: skip
    try:

        def healthy() -> bool:
            try:
                url = f"http://127.0.0.1:{api_port}/health"
                with urllib.request.urlopen(url, timeout=3) as response:
                    return json.loads(response.read()).get("status") == "ok"
            except OSError:
                return False

        wait_until(healthy, 180, "/health of the gateway in the container")
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert "hermes_runtime_gateway_up 1.0" in response.read().decode()
        # Hermes' own state.db, written in the container, by the image's SQLite.
        probe = (
            "import sqlite3; db = sqlite3.connect('/opt/data/state.db');"
            "print(db.execute('select sqlite_version()').fetchone()[0])"
        )
        version = docker("exec", name, "python", "-c", probe).stdout.strip()
        assert tuple(int(p) for p in version.split(".")) >= (3, 51, 3)
        docker("stop", "-t", "40", name, timeout=60)
        status = docker("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
        logs = docker("logs", name).stderr + docker("logs", name).stdout
        assert status == "0", logs[-3000:]
        assert '"event": "agent.gateway.stopped"' in logs
        assert API_KEY not in logs
    finally:
        docker("rm", "-f", name, check=False)

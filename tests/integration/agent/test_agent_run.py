"""`hermes-runtime agent run` with the real Hermes gateway as a process: seed, link, serve, stop.

The only fake is the LLM (tests/fakes/openai_server.py, in its container: the tier's
``fake_llm``). Each test starts a real gateway, so the file takes a few tens of seconds.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fakes.fixtures import FakeLLM
from ruamel.yaml import YAML
from support.git_sync import git_sync_new_commit, git_synced_plugin
from support.net import free_port
from support.wait import wait_until

API_KEY = "agent-test-key-0123456789abcdef"
BIN = Path(sys.executable).parent


@dataclass
class Agent:
    proc: subprocess.Popen[str]
    data: Path
    api_port: int
    metrics_port: int
    secrets: Path
    env: dict[str, str] = field(default_factory=dict)  # the container's, also the hook's

    def get(self, path: str, port: int | None = None) -> str:
        url = f"http://127.0.0.1:{port or self.api_port}{path}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def healthy(self) -> bool:
        try:
            return json.loads(self.get("/health")).get("status") == "ok"
        except OSError:
            return False

    def metric(self, name: str) -> float | None:
        for line in self.get("/metrics", self.metrics_port).splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def metric_sum(self, name: str) -> float:
        """Sum over every label set of ``name``."""
        lines = self.get("/metrics", self.metrics_port).splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(name + "{"))

    def chat(self, text: str) -> str:
        body = json.dumps(
            {"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}
        )
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.api_port}/v1/chat/completions",
            data=body.encode(),
            headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            return str(json.loads(response.read())["choices"][0]["message"]["content"])

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def readiness(self) -> tuple[int, dict[str, Any]]:
        try:
            return 200, json.loads(self.get("/ready", self.metrics_port))
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def pre_stop(self) -> tuple[int, dict[str, Any]]:
        """The kubelet's preStop hook: ``exec hermes-runtime agent pre-stop`` in the container."""
        done = subprocess.run(
            [str(BIN / "hermes-runtime"), "agent", "pre-stop", "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return done.returncode, json.loads(done.stdout) if done.stdout else {"err": done.stderr}


@pytest.fixture
def layout(tmp_path: Path, fake_llm: FakeLLM) -> dict[str, Path]:
    etc = tmp_path / "etc"
    etc.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    (etc / "config.yaml").write_text(
        "# seeded by the chart\n"
        "model:\n"
        "  provider: custom\n"
        f"  base_url: {fake_llm.base_url}\n"
        "  default: fake-model\n"
        "  api_key: x\n"
        "agent:\n"
        "  max_turns: 10\n"
    )
    (etc / "SOUL.md").write_text("You are a test agent.\n")
    (etc / "plugins.yaml").write_text("plugins:\n- name: hello\n  subPath: ''\n  enabled: true\n")
    secrets = tmp_path / "secrets.env"
    secrets.write_text(f"API_SERVER_KEY={API_KEY}\n")
    secrets.chmod(0o600)
    return {"etc": etc, "data": data, "secrets": secrets}


def start_agent(layout: dict[str, Path], tmp_path: Path, **extra_env: str) -> Agent:
    api_port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "HERMES_HOME": str(layout["data"]),
        "HERMES_RUNTIME_PLUGIN_SPEC": str(layout["etc"] / "plugins.yaml"),
        "HERMES_RUNTIME_SEED_CONFIG": str(layout["etc"] / "config.yaml"),
        "HERMES_RUNTIME_SEED_SOUL": str(layout["etc"] / "SOUL.md"),
        "HERMES_RUNTIME_SECRETS_ENV": str(layout["secrets"]),
        "HERMES_RUNTIME_METRICS_PORT": str(metrics_port),
        "API_SERVER_HOST": "127.0.0.1",
        "API_SERVER_PORT": str(api_port),
        "HERMES_RUNTIME_GATEWAY_PORT": str(free_port()),  # the gateway behind the front door
        # In the chart: /run/hermes-runtime, an emptyDir only the agent container mounts.
        "HERMES_RUNTIME_CONTROL_SOCKET": str(tmp_path / "agent.sock"),
        **extra_env,
    }
    env.pop("API_SERVER_KEY", None)
    log = open(tmp_path / "agent.log", "w")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(
        [str(BIN / "hermes-runtime"), "agent", "run"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return Agent(proc, layout["data"], api_port, metrics_port, layout["secrets"], env)


@contextlib.contextmanager
def serving_agent(layout: dict[str, Path], tmp_path: Path, **extra_env: str) -> Iterator[Agent]:
    """A started agent whose gateway answers /health; stopped after the block, exit 0 checked
    (when the block itself failed, the agent is only stopped)."""
    agent = start_agent(layout, tmp_path, **extra_env)
    try:
        wait_until(agent.healthy, 120, "the gateway's /health")
        yield agent
    except BaseException:
        agent.stop()
        raise
    status = agent.stop()
    assert status == 0, (tmp_path / "agent.log").read_text()[-3000:]


def test_agent_run_seeds_links_serves_and_stops_cleanly(
    layout: dict[str, Path], tmp_path: Path
) -> None:
    git_synced_plugin(layout["data"], "hello", tmp_path)
    with serving_agent(layout, tmp_path) as agent:
        assert agent.proc.poll() is None
        data = layout["data"]
        config = YAML(typ="safe").load((data / "config.yaml").read_text())
        assert config["model"]["default"] == "fake-model"
        assert "hello" in config["plugins"]["enabled"]
        assert (data / "SOUL.md").read_text() == "You are a test agent.\n"
        # The link names the checked worktree git-sync's current points at, not current itself.
        link = os.readlink(data / "plugins" / "hello")
        assert link.startswith("../.git-sync/hello/.worktrees/")
        current = data / ".git-sync" / "hello" / "current"
        assert (data / "plugins" / "hello").resolve() == current.resolve()
        wait_until((data / "plugin-loads.log").exists, 30, "the plugin's register()")
        assert agent.chat("hello agent") == "Echo: hello agent"
        assert agent.metric("hermes_runtime_gateway_up") == 1
        assert agent.metric('hermes_runtime_plugin_linked{plugin="hello"}') == 1
        uptime = agent.metric("hermes_runtime_uptime_seconds")
        assert uptime is not None and uptime > 0
        ready = json.loads(agent.get("/ready", agent.metrics_port))
        assert ready == {"ready": True, "checks": {"gateway": "ok", "data": "ok", "lcm": "ok"}}
        assert_shared_with_the_group(data)
    log = (tmp_path / "agent.log").read_text()
    # The drain gets the grace period (30 s by default, minus our margins), never 0 s.
    assert "drain timed out after 0.0s" not in log
    assert '"event": "agent.gateway.stopped"' in log
    assert API_KEY not in log  # the secret never reaches the logs


def assert_shared_with_the_group(data: Path) -> None:
    """replicate and backup run as other UIDs and reach the data dir through the pod's group:
    the gateway runs under the shared umask, and the folders Hermes makes (0700 by its own
    default) and the seeded files stay the group's. (A database SQLite creates is 0644 under
    any umask: the next start's walk widens it, see the restart test.)"""
    gateway_pid = int(json.loads((data / "gateway.pid").read_text())["pid"])
    status = Path(f"/proc/{gateway_pid}/status").read_text().splitlines()
    assert [line for line in status if line.startswith("Umask:")] == ["Umask:\t0002"]
    for folder in (data, data / "sessions", data / "memories", data / "logs"):
        assert folder.stat().st_mode & 0o070 == 0o070, f"{folder}: {folder.stat().st_mode:o}"
    for name in ("config.yaml", "SOUL.md"):
        assert (data / name).stat().st_mode & 0o060 == 0o060, name


def test_user_edits_survive_a_restart_and_secret_rotation_restarts_the_gateway(
    layout: dict[str, Path], tmp_path: Path
) -> None:
    with serving_agent(layout, tmp_path) as agent:
        gateway_pid = int(json.loads((layout["data"] / "gateway.pid").read_text())["pid"])
        # Rotation: the vault sidecar rewrites the file; the gateway must restart to see it.
        layout["secrets"].write_text(f"API_SERVER_KEY={API_KEY}\nEXTRA_TOKEN=rotated-value\n")
        wait_until(
            lambda: agent.metric("hermes_runtime_gateway_starts_total") == 2,
            60,
            "a gateway restart after the secrets file changed",
        )
        wait_until(agent.healthy, 120, "/health after the restart")
        new_pid = int(json.loads((layout["data"] / "gateway.pid").read_text())["pid"])
        assert new_pid != gateway_pid
        environ = Path(f"/proc/{new_pid}/environ").read_bytes().split(b"\0")
        assert b"EXTRA_TOKEN=rotated-value" in environ
    # The user edits config.yaml; the chart changes another key; a new start merges both.
    config_path = layout["data"] / "config.yaml"
    config_path.write_text(config_path.read_text().replace("max_turns: 10", "max_turns: 42"))
    seed = layout["etc"] / "config.yaml"
    seed.write_text(
        seed.read_text().replace("max_turns: 10", "max_turns: 11") + "display:\n  x: 1\n"
    )
    prepared = subprocess.run(
        [str(BIN / "hermes-runtime"), "agent", "prepare", "--json"],
        env={
            **os.environ,
            "HERMES_HOME": str(layout["data"]),
            "HERMES_RUNTIME_SEED_CONFIG": str(seed),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert prepared.returncode == 0, prepared.stderr
    # The start's walk gave the group what the gateway's SQLite made 0644.
    assert (layout["data"] / "state.db").stat().st_mode & 0o060 == 0o060
    assert '"agent.data_dir.shared"' in prepared.stderr
    report = json.loads(prepared.stdout)
    assert report["config"]["applied_keys"] == ["display"]
    assert report["config"]["kept_user_keys"] == ["agent.max_turns"]
    config = YAML(typ="safe").load(config_path.read_text())
    assert config["agent"]["max_turns"] == 42
    assert config["display"] == {"x": 1}


def secret_volume(root: Path, key: str) -> Path:
    """A Secret volume as the kubelet writes it: files behind ``..data``, swapped atomically."""
    root.mkdir(exist_ok=True)
    version = root / f"..{time.monotonic_ns()}"
    version.mkdir()
    (version / "api-key").write_text(key)
    staged = root / "..data_tmp"
    staged.symlink_to(version.name)
    staged.rename(root / "..data")
    if not (root / "api-key").is_symlink():
        (root / "api-key").symlink_to("..data/api-key")
    return root / "api-key"


def status_with_key(agent: Agent, key: str) -> int:
    body = json.dumps({"model": "hermes-agent", "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(
        f"http://127.0.0.1:{agent.api_port}/v1/chat/completions",
        data=body.encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_new_api_key_in_its_secret_volume_reaches_the_gateway_without_a_new_pod(
    layout: dict[str, Path], tmp_path: Path
) -> None:
    """The chart mounts the API key's Secret (HERMES_RUNTIME_API_KEY_FILE): when the Secret
    changes the kubelet swaps the file and the gateway restarts onto the new key."""
    layout["secrets"].write_text("OTHER=1\n")  # the key comes from the file alone
    key_file = secret_volume(tmp_path / "api-key", API_KEY)
    with serving_agent(layout, tmp_path, HERMES_RUNTIME_API_KEY_FILE=str(key_file)) as agent:
        assert status_with_key(agent, API_KEY) == 200
        rotated = API_KEY + "-rotated"
        secret_volume(tmp_path / "api-key", rotated)
        wait_until(
            lambda: agent.metric("hermes_runtime_gateway_starts_total") == 2,
            60,
            "a gateway restart after the key file changed",
        )
        wait_until(agent.healthy, 120, "/health after the restart")
        assert status_with_key(agent, rotated) == 200
        assert status_with_key(agent, API_KEY) == 401
    assert rotated not in (tmp_path / "agent.log").read_text()


def test_without_an_api_key_the_agent_refuses_to_start_and_says_where_to_put_it(
    layout: dict[str, Path], tmp_path: Path
) -> None:
    layout["secrets"].write_text("OTHER=1\n")
    agent = start_agent(layout, tmp_path)
    assert agent.proc.wait(60) == 1
    log = (tmp_path / "agent.log").read_text()
    assert "API_SERVER_KEY is not set" in log
    assert str(layout["secrets"]) in log


def test_a_new_plugin_commit_restarts_the_gateway_onto_it(
    layout: dict[str, Path], tmp_path: Path
) -> None:
    """git-sync swaps ``current``; the watcher drains the gateway and sends SIGUSR1; it exits
    75; the supervisor starts a new gateway, which loads the plugin again."""
    data = layout["data"]
    git_synced_plugin(data, "hello", tmp_path)
    loads = data / "plugin-loads.log"
    with serving_agent(layout, tmp_path) as agent:
        wait_until(loads.exists, 30, "the plugin's first load")
        first_pids = {line.split()[1] for line in loads.read_text().splitlines()}
        sha = git_sync_new_commit(data, "hello", tmp_path, "v2")
        wait_until(
            lambda: agent.metric("hermes_runtime_gateway_starts_total") == 2,
            90,
            "the gateway restart after the new commit",
        )
        wait_until(agent.healthy, 120, "/health after the restart")
        pids = {line.split()[1] for line in loads.read_text().splitlines()}
        assert pids - first_pids, "the new gateway did not load the plugin"
        assert (data / "plugins" / "hello" / "VERSION").read_text() == "v2\n"
        assert sha in os.readlink(data / ".git-sync" / "hello" / "current")
        restarts = agent.metric('hermes_runtime_gateway_restarts_total{reason="plugins-changed"}')
        assert restarts == 1
        assert agent.metric_sum("hermes_runtime_gateway_restarts_total") == 1  # counted once


def test_sigterm_lets_an_in_flight_turn_finish_within_the_grace_period(
    layout: dict[str, Path], tmp_path: Path, fake_llm: FakeLLM
) -> None:
    """Hermes' drain time comes from the grace period: a turn whose model call is still running
    when SIGTERM arrives gets its reply (with Hermes' default of 0 s it was interrupted)."""
    replies: list[str] = []
    with serving_agent(layout, tmp_path, HERMES_RUNTIME_TERMINATION_GRACE_SECONDS="40") as agent:
        fake_llm.reset()
        fake_llm.set_mode("hang", hang_seconds=4)
        client = threading.Thread(target=lambda: replies.append(agent.chat("slow question")))
        client.start()
        wait_until(fake_llm.requests, 60, "the turn's model call")
    client.join(60)  # the agent got SIGTERM at the end of the block, mid-turn
    assert replies == ["Echo: slow question"]
    gateway_log = (layout["data"] / "logs" / "gateway.log").read_text()
    assert "timed_out=False" in gateway_log and "api_at_start=1, api_now=0" in gateway_log


def test_a_gateway_killed_with_sigkill_is_restarted_in_place(
    layout: dict[str, Path], tmp_path: Path
) -> None:
    """The real gateway, kill -9: the entrypoint (the container) stays, a new gateway serves.

    On a volume that saw many gateway starts lately (hand-overs, restarts): Hermes' own
    respawn-storm breaker would sleep minutes before binding; the entrypoint turns it off."""
    now = time.time()
    starts = "".join(f"{now - second!r}\n" for second in range(10))
    (layout["data"] / "gateway-starts.log").write_text(starts)
    with serving_agent(layout, tmp_path) as agent:
        pid_file = layout["data"] / "gateway.pid"
        killed = int(json.loads(pid_file.read_text())["pid"])
        os.kill(killed, signal.SIGKILL)
        wait_until(
            lambda: agent.metric("hermes_runtime_gateway_starts_total") == 2,
            60,
            "a new gateway after kill -9",
        )
        wait_until(agent.healthy, 120, "/health after the restart")
        assert agent.proc.poll() is None
        assert int(json.loads(pid_file.read_text())["pid"]) != killed
        assert agent.metric('hermes_runtime_gateway_restarts_total{reason="crash-SIGKILL"}') == 1
        assert agent.chat("still there?") == "Echo: still there?"
    logs = [tmp_path / "agent.log", *(layout["data"] / "logs").glob("*.log")]
    assert not [log for log in logs if "respawn storm" in log.read_text()]


# Ours, old and guessed, and Hermes' own (without a key: refused by Hermes, on the API port).
PATHS = (
    "/",
    "/metrics",
    "/ready",
    "/pre-stop",
    "/pre-stop?now=1",
    "/prestop",
    "/stop",
    "/shutdown",
    "/restart",
    "/drain",
    "/health",
    "/v1/models",
    "/v1/chat/completions",
    "/v1/responses",
    "/v1/runs",
    "/v1/runs/x/stop",
    "/api/sessions",
    "/api/jobs",
    "/api/cron/fire",
)
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "STOP")
READY = {"ready": True, "checks": {"gateway": "ok", "data": "ok", "lcm": "ok"}}


def send(port: int, method: str, path: str) -> int:
    """One unauthenticated request on its own connection: the status (0: reset)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = b'{"stop": true}' if method in ("POST", "PUT", "PATCH") else None
        headers = {"Content-Type": "application/json"} if body else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return 0
    finally:
        conn.close()


def test_no_request_on_either_port_changes_the_agent_only_the_exec_hook_stops_it(
    layout: dict[str, Path], tmp_path: Path
) -> None:
    """Every method on every path of the metrics and API ports, unauthenticated, as any pod
    of the cluster could send them: the pod stays ready and its gateway is never restarted.
    Then the kubelet's hook (exec ``agent pre-stop``): unready, and SIGTERM stops it cleanly."""
    with serving_agent(layout, tmp_path) as agent:
        wait_until(lambda: agent.readiness()[0] == 200, 60, "/ready")
        metrics_answers: dict[tuple[str, str], int] = {}
        for port in (agent.metrics_port, agent.api_port):
            for path in PATHS:
                for method in METHODS:
                    status = send(port, method, path)
                    if port == agent.metrics_port:
                        metrics_answers[(method, path)] = status
                    assert agent.readiness() == (200, READY), (port, method, path)
        assert {s for (m, _), s in metrics_answers.items() if m != "GET"} == {405}
        assert {p for (m, p), s in metrics_answers.items() if m == "GET" and s == 200} == {
            "/metrics",
            "/ready",
        }
        assert agent.metric("hermes_runtime_gateway_starts_total") == 1
        assert agent.chat("still serving?") == "Echo: still serving?"
        status, answer = agent.pre_stop()
        assert status == 0 and answer["stopping"] is True and answer["successor"] is False
        stopping = {"ready": False, "checks": {"stopping": "the pod is stopping"}}
        assert agent.readiness() == (503, stopping)
    log = (tmp_path / "agent.log").read_text()
    assert log.count('"event": "agent.pre_stop"') == 1

"""The hand-over: drain time from the grace period, /ready, and the preStop hook.

Real entrypoint processes with the stand-in gateway (fake_gateway.py): the kubelet's part is
played by what it would do: GET ``/ready``, exec ``hermes-runtime agent pre-stop`` in the
container, SIGTERM.
"""

from __future__ import annotations

import json
import signal
import socket
import stat
from pathlib import Path

import pytest
from fake_gateway import history, start_entrypoint, wait_for

from hermes_runtime.agent import AgentSettings
from hermes_runtime.agent.settings import DEFAULT_PRELOAD
from hermes_runtime.common.errors import RuntimeFailure


def test_the_drain_time_follows_the_grace_period_and_is_never_zero() -> None:
    settings = AgentSettings.from_environ(
        {
            "HERMES_RUNTIME_TERMINATION_GRACE_SECONDS": "60",
            "HERMES_RUNTIME_PRESTOP_SECONDS": "5",
        }
    )
    assert settings.stop_budget == 53  # 60 - 5 (preStop) - 2 (our own exit)
    waiting = AgentSettings.from_environ(
        {
            "HERMES_RUNTIME_TERMINATION_GRACE_SECONDS": "60",
            "HERMES_RUNTIME_PRESTOP_SECONDS": "4",
            "HERMES_RUNTIME_HANDOVER_SECONDS": "20",
        }
    )
    assert waiting.drain_timeout == 31  # 60 - 20 (successor wait) - 4 - 2 - 3
    assert settings.drain_timeout == 50  # Hermes' shutdown gets the last 3 s
    default = AgentSettings.from_environ({})
    assert default.drain_timeout == 25  # Kubernetes' default 30 s grace period
    tiny = AgentSettings.from_environ({"HERMES_RUNTIME_TERMINATION_GRACE_SECONDS": "0"})
    assert tiny.drain_timeout == 1.0


def test_the_warm_gateway_preload_list_is_read_from_the_env() -> None:
    assert AgentSettings.from_environ({}).preload == DEFAULT_PRELOAD
    given = {"HERMES_RUNTIME_GATEWAY_PRELOAD": " openai, aiohttp.web "}
    assert AgentSettings.from_environ(given).preload == ("openai", "aiohttp.web")
    assert AgentSettings.from_environ({"HERMES_RUNTIME_GATEWAY_PRELOAD": "none"}).preload == ()
    with pytest.raises(
        RuntimeFailure,
        match="HERMES_RUNTIME_GATEWAY_PRELOAD='open-ai' is refused: open-ai is no module",
    ):
        AgentSettings.from_environ({"HERMES_RUNTIME_GATEWAY_PRELOAD": "open-ai"})


@pytest.mark.parametrize("value", ["soon", "-1", "inf", "nan"])
def test_a_bad_grace_period_names_the_variable(value: str) -> None:
    with pytest.raises(RuntimeFailure, match="HERMES_RUNTIME_TERMINATION_GRACE_SECONDS"):
        AgentSettings.from_environ({"HERMES_RUNTIME_TERMINATION_GRACE_SECONDS": value})


def test_pre_stop_turns_the_pod_unready_and_it_stays_reachable_after_its_gateway(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with socket.socket(socket.AF_UNIX) as stale:  # a previous container's, in the emptyDir
        stale.bind(str(tmp_path / "agent.sock"))
    agent = start_entrypoint(
        data,
        tmp_path,
        "agent",
        HERMES_RUNTIME_TERMINATION_GRACE_SECONDS="60",
        # Long enough that "reachable after the gateway exited" is seen on a loaded box.
        HERMES_RUNTIME_PRESTOP_SECONDS="6",
    )
    wait_for(lambda: agent.get("/ready")[0] == 200, what="/ready")
    assert stat.S_IMODE(agent.control_socket.stat().st_mode) == 0o600  # replaced, ours only
    status, body = agent.get("/ready")
    assert json.loads(body) == {
        "ready": True,
        "checks": {"gateway": "ok", "data": "ok", "lcm": "ok"},
    }
    env = json.loads((data / "gateway-env.log").read_text().splitlines()[-1])
    assert env["HERMES_RESTART_DRAIN_TIMEOUT"] == "49"  # 60 - 6 - 2 - 3
    # The kubelet runs the preStop hook: no successor wait here (handover 0), unready at once.
    status, answer = agent.pre_stop(timeout=30)
    assert status == 0 and answer["stopping"] is True and answer["successor"] is False
    assert json.loads(agent.get("/ready")[1])["checks"] == {"stopping": "the pod is stopping"}
    assert agent.get("/health", agent.api_port)[0] == 200  # SIGTERM has not come yet
    agent.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: any(e.what == "end" for e in history(data)), what="the gateway's exit")
    # The gateway is gone; the API port still takes connections and closes them at once.
    with socket.create_connection(("127.0.0.1", agent.api_port), timeout=5) as sock:
        assert sock.recv(100) == b""
    assert agent.proc.poll() is None
    assert agent.proc.wait(60) == 0, agent.output()[-2000:]
    assert "agent.stop.reachable" in agent.output()


def test_ready_fails_naming_an_unreadable_lcm_database(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text("context:\n  engine: lcm\n")
    (data / "lcm.db").write_bytes(b"this is not a database" * 100)
    agent = start_entrypoint(data, tmp_path, "agent")
    try:
        wait_for(lambda: agent.get("/health", agent.api_port)[0] == 200, what="the gateway")
        status, body = agent.get("/ready")
        assert status == 503
        checks = json.loads(body)["checks"]
        assert checks["gateway"] == "ok" and checks["data"] == "ok"
        assert checks["lcm"].startswith(f"{data / 'lcm.db'}: ")
        (data / "lcm.db").unlink()  # the engine will create it with the first session
        assert agent.get("/ready")[0] == 200
    finally:
        assert agent.stop() == 0

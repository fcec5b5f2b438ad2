"""Only the kubelet starts the stop: no request on the agent's ports changes its state, the
preStop hook reaches the entrypoint over its Unix socket, and a stop no SIGTERM follows is undone.

Real entrypoint processes with the stand-in gateway (fake_gateway.py); the requests are real
HTTP on real sockets, the hook is the real ``hermes-runtime agent pre-stop``.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_gateway import Entrypoint, start_entrypoint, started, wait_for

from hermes_runtime.cli import main

# Every path the metrics port ever served, the obvious guesses at a control path, and the
# gateway's own; sent to both ports with every method.
PATHS = (
    "/",
    "/metrics",
    "/ready",
    "/pre-stop",
    "/pre-stop?now=1",
    "/pre-stop/",
    "//pre-stop",
    "/prestop",
    "/stop",
    "/handover",
    "/shutdown",
    "/drain",
    "/restart",
    "/quit",
    "/control",
    "/admin",
    "/health",
)
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "STOP")
READY = {"ready": True, "checks": {"gateway": "ok", "data": "ok", "lcm": "ok"}}


def send(port: int, method: str, path: str) -> int:
    """One request on its own connection; the status, or 0 when the server reset it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = b'{"stop": true}' if method in ("POST", "PUT", "PATCH") else None
        conn.request(method, path, body=body)
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return 0  # the stand-in gateway does not read bodies it has no handler for
    finally:
        conn.close()


def ready(agent: Entrypoint) -> dict[str, object]:
    status, body = agent.get("/ready")
    return {"status": status, **json.loads(body)} if status else {"status": status}


def test_no_request_on_the_metrics_or_api_port_changes_readiness(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    agent = start_entrypoint(data, tmp_path, "agent")
    try:
        wait_for(lambda: agent.get("/ready")[0] == 200, what="ready")
        answers: dict[tuple[str, str], int] = {}
        for port_name, port in (("metrics", agent.metrics_port), ("api", agent.api_port)):
            for path in PATHS:
                for method in METHODS:
                    status = send(port, method, path)
                    if port_name == "metrics":
                        answers[(method, path)] = status
                    assert ready(agent) == {"status": 200, **READY}, (port_name, method, path)
        assert {s for (m, _), s in answers.items() if m != "GET"} == {405}
        gets = {path: s for (m, path), s in answers.items() if m == "GET"}
        assert {p for p, s in gets.items() if s == 200} == {"/metrics", "/ready"}
        assert {s for p, s in gets.items() if p not in ("/metrics", "/ready")} == {404}
        assert len(started(data, "agent")) == 1  # no restart, no stop
        assert "agent.pre_stop" not in agent.output()
    finally:
        assert agent.stop() == 0, agent.output()[-2000:]


def test_an_abandoned_pre_stop_turns_the_pod_ready_again(tmp_path: Path) -> None:
    """The hook run by hand (``kubectl exec``, or the agent's shell), no SIGTERM after it:
    repeated hooks meanwhile are ignored and do not extend it; once the grace period and the
    margin have passed, the pod is ready again, and says why; a hook after that no longer
    turns it unready before a SIGTERM, so a loop of hooks cannot keep it out of the Service."""
    data = tmp_path / "data"
    data.mkdir()
    agent = start_entrypoint(data, tmp_path, "agent", HERMES_RUNTIME_TERMINATION_GRACE_SECONDS="1")
    try:
        wait_for(lambda: agent.get("/ready")[0] == 200, what="ready")
        status, answer = agent.pre_stop(timeout=30)
        first_hook = time.monotonic()
        assert status == 0 and answer["stopping"] is True and "ignored" not in answer
        assert ready(agent)["checks"] == {"stopping": "the pod is stopping"}
        for _ in range(3):  # the shell's loop: answered at once, ignored, logged
            status, answer = agent.pre_stop(timeout=30)
            assert status == 0 and answer["ignored"] is True
        assert agent.output().count('"agent.pre_stop.ignored"') == 3
        wait_for(lambda: "agent.pre_stop.abandoned" in agent.output(), what="the abandon")
        # Undone on the first hook's timer (11 s), not re-armed by the ignored ones.
        assert time.monotonic() - first_hook < 11.0 + 5.0
        assert ready(agent) == {"status": 200, **READY}
        assert len(started(data, "agent")) == 1
        status, answer = agent.pre_stop(timeout=30)
        assert status == 0 and answer["deferred"] is True
        assert ready(agent) == {"status": 200, **READY}  # still in the Service
        assert "agent.pre_stop.deferred" in agent.output()
        agent.proc.send_signal(signal.SIGTERM)  # a real stop's SIGTERM still stops it
        assert agent.proc.wait(60) == 0, agent.output()[-2000:]
    finally:
        agent.proc.kill()
    (line, *_) = [json.loads(x) for x in agent.output().splitlines() if "pre_stop.abandoned" in x]
    assert line["after_seconds"] == 11.0  # the grace period (1 s) + the 10 s margin


def test_the_hook_without_an_entrypoint_exits_0_at_once_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "agent.sock"
    with socket.socket(socket.AF_UNIX) as left_behind:  # a previous container's socket
        left_behind.bind(str(stale))
    for path in (stale, tmp_path / "none.sock"):
        assert main(["agent", "pre-stop", "--socket", str(path)]) == 0
        out = capsys.readouterr().out
        assert f"pre-stop: no entrypoint listens on {path}" in out
        assert "nothing to hand over" in out


def connect_as(uid: int, path: Path) -> str:
    """Ask ``path`` for the stop as another user: a forked child that drops to ``uid`` (the
    test's interpreter may sit where that user cannot run it). What the child got back."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only system calls, then _exit
        result = "error:unknown"
        try:
            os.setgid(uid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(10)
                sock.connect(str(path))
                sock.sendall(b"pre-stop\n")
                result = "answer:" + sock.recv(4096).decode()
        except OSError as exc:
            result = f"error:{exc.strerror}"
        finally:
            os.write(write_end, result.encode())
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end) as got:
        return got.read()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can reach (pytest's own temp is its owner's only)."""
    path = Path(tempfile.mkdtemp(prefix="hermes-control-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_another_user_in_the_pod_cannot_ask_for_the_stop(tmp_path: Path, shared_dir: Path) -> None:
    """The socket is 0600; even opened up, a peer with another UID is refused (SO_PEERCRED).
    Connecting as another user needs root (the CI machine and the dev VM run tests as root):
    without it the test fails, saying so (a skip would count as passing)."""
    if os.geteuid() != 0:
        pytest.fail("connecting as another user needs root: run the tests as root")
    data = tmp_path / "data"
    data.mkdir()
    sock = shared_dir / "agent.sock"
    agent = start_entrypoint(data, tmp_path, "agent", HERMES_RUNTIME_CONTROL_SOCKET=str(sock))
    try:
        wait_for(lambda: agent.get("/ready")[0] == 200, what="ready")
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        assert connect_as(65533, sock) == "error:Permission denied"
        sock.chmod(0o666)
        # Closed without an answer: a reset if the command it sent was never read, a broken
        # pipe if the entrypoint closed before the command was written.
        no_answer = ("answer:", "error:Connection reset by peer", "error:Broken pipe")
        assert connect_as(65533, sock) in no_answer
        assert ready(agent) == {"status": 200, **READY}
        # The entrypoint logs the refusal on its own thread: under load after the reset.
        wait_for(lambda: '"agent.control.refused"' in agent.output(), what="the refusal logged")
        refused = [x for x in agent.output().splitlines() if '"agent.control.refused"' in x]
        assert json.loads(refused[0])["peer_uid"] == 65533
        assert "agent.pre_stop" not in agent.output()
    finally:
        assert agent.stop() == 0, agent.output()[-2000:]

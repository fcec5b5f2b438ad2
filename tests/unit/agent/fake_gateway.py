"""`hermes-runtime agent run` as the image runs it, with a small stand-in for the Hermes gateway.

The entrypoint starts ``python -m hermes_cli.main gateway run``; a ``hermes_cli`` package put
first on the gateway's ``PYTHONPATH`` takes its place (set through the secrets env file, which
only the gateway's environment reads, so the entrypoint itself still imports real Hermes).
The stand-in imports ``fake_heavy`` first, which takes ``FAKE_IMPORT_SECONDS`` and notes each
import in ``FAKE_IMPORT_LOG`` (outside the data dir): the entrypoint's warm gateway preloads it
(``HERMES_RUNTIME_GATEWAY_PRELOAD=fake_heavy``) while it waits for the lock, as it preloads
Hermes' libraries. It serves ``/health`` on the port the entrypoint gives it (behind the front
door) after ``FAKE_START_SECONDS``, keeps a history file of its
starts and ends in the data dir (the evidence the lock tests read), writes Hermes' drain
state file, and on SIGINT or SIGTERM waits ``FAKE_DRAIN_SECONDS`` before exiting, as a
draining gateway does. Everything else (settings, lock, seeding,
supervisor, metrics) is the real entrypoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.net import free_port

import hermes_runtime

BIN = Path(sys.executable).parent
SOURCE_ROOT = Path(hermes_runtime.__file__).resolve().parents[1]
API_KEY = "fake-gateway-key-0123456789abcdef"

FAKE_HEAVY = r"""
import os, time
time.sleep(float(os.environ.get("FAKE_IMPORT_SECONDS", "0")))
if os.environ.get("FAKE_IMPORT_LOG"):
    with open(os.environ["FAKE_IMPORT_LOG"], "a") as fh:
        fh.write(f"{time.time():.6f} {os.getpid()}\n")
"""

# A sloppy library: touches the data dir when imported and swallows the error.
FAKE_TOUCH = r"""
import os
try:
    with open(os.path.join(os.environ["HERMES_HOME"], "touched-before-lock"), "w") as fh:
        fh.write("x")
except OSError:
    pass
"""

FAKE_MAIN = r"""
import fake_heavy
import http.server, json, os, signal, sys, threading, time
from pathlib import Path

home = Path(os.environ["HERMES_HOME"])
name = os.environ.get("AGENT_NAME", "")

def note(what):
    with open(home / "gateway-history.log", "a") as fh:
        fh.write(f"{time.time():.6f} {what} {os.getpid()} {name}\n")

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"status": "ok", "name": name}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

stopping = []  # a plain flag: a handler that set an Event could deadlock the main thread

def stopped():
    return bool(stopping)

def state_file():
    # Hermes' drain contract (gateway/drain_control.py): the external drain marker turns the
    # gateway "draining"; active_agents is its in-flight work (none here).
    while not stopped():
        draining = (home / ".drain_request.json").exists()
        state = {"gateway_state": "draining" if draining else "running", "active_agents": 0}
        tmp = home / "gateway_state.json.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, home / "gateway_state.json")
        time.sleep(0.05)

threading.Thread(target=state_file, daemon=True).start()
for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):  # SIGINT: Hermes' planned stop
    signal.signal(signum, lambda s, f: stopping.append(s))
note("start")
with open(home / "gateway-env.log", "a") as fh:
    fh.write(json.dumps({k: v for k, v in os.environ.items() if k.startswith("HERMES_")}) + "\n")
time.sleep(float(os.environ.get("FAKE_START_SECONDS", "0")))  # Hermes imports for seconds
server = http.server.ThreadingHTTPServer(
    (os.environ["API_SERVER_HOST"], int(os.environ["API_SERVER_PORT"])), Health
)
threading.Thread(target=server.serve_forever, daemon=True).start()
while not stopped():
    time.sleep(0.02)
time.sleep(float(os.environ.get("FAKE_DRAIN_SECONDS", "0.3")))
note("end")
server.shutdown()
"""


def shadow_hermes(root: Path) -> Path:
    """Write the stand-in ``hermes_cli`` package under ``root``; returns the PYTHONPATH entry."""
    package = root / "shadow" / "hermes_cli"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "main.py").write_text(FAKE_MAIN)
    (package.parent / "fake_heavy.py").write_text(FAKE_HEAVY)
    (package.parent / "fake_touch.py").write_text(FAKE_TOUCH)
    return package.parent


@dataclass
class Entrypoint:
    """One ``hermes-runtime agent run`` process and where its output goes."""

    proc: subprocess.Popen[bytes]
    log: Path
    api_port: int
    metrics_port: int
    env: dict[str, str]  # the container's env, which the kubelet's exec hook gets too

    @property
    def control_socket(self) -> Path:
        return Path(self.env["HERMES_RUNTIME_CONTROL_SOCKET"])

    def pre_stop(self, timeout: float = 90) -> tuple[int, dict[str, Any]]:
        """The kubelet's preStop hook: ``exec hermes-runtime agent pre-stop`` in the container
        (its env), as ``(exit status, its --json answer)``."""
        done = subprocess.run(
            [str(BIN / "hermes-runtime"), "agent", "pre-stop", "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        answer = json.loads(done.stdout) if done.stdout.strip() else {"stderr": done.stderr}
        return done.returncode, answer

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def get(self, path: str, port: int | None = None, timeout: float = 5) -> tuple[int, str]:
        """``(status, body)`` of a GET on the metrics port (or ``port``)."""
        url = f"http://127.0.0.1:{port or self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:  # not listening (yet, or any more): status 0
            return 0, str(exc)

    def stop(self, timeout: float = 90) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


def distinct_ports(count: int) -> list[int]:
    """Free ports, all different (two quick ``free_port`` calls can return the same one)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def start_entrypoint(data: Path, scratch: Path, name: str, **env: str) -> Entrypoint:
    """Start ``hermes-runtime agent run`` on ``data`` with the stand-in gateway."""
    api_port, metrics_port, gateway_port = distinct_ports(3)
    secrets = scratch / f"{name}-secrets.env"
    secrets.write_text(f"API_SERVER_KEY={API_KEY}\nPYTHONPATH={shadow_hermes(scratch)}\n")
    full_env = {
        **os.environ,
        "HERMES_HOME": str(data),
        "HERMES_RUNTIME_SECRETS_ENV": str(secrets),
        "API_SERVER_HOST": "127.0.0.1",
        "API_SERVER_PORT": str(api_port),
        "HERMES_RUNTIME_GATEWAY_PORT": str(gateway_port),  # the gateway behind the front door
        "HERMES_RUNTIME_METRICS_PORT": str(metrics_port),
        "HERMES_RUNTIME_GATEWAY_PRELOAD": "fake_heavy",
        "AGENT_NAME": name,
        # In the chart: /run/hermes-runtime, an emptyDir only the agent container mounts.
        "HERMES_RUNTIME_CONTROL_SOCKET": str(scratch / f"{name}.sock"),
        **env,
    }
    for unset in ("HERMES_RUNTIME_PLUGIN_SPEC", "API_SERVER_KEY", "PYTHONPATH"):
        full_env.pop(unset, None)
    # The entrypoint runs the hermes_runtime this test imports (a git worktree's, not the one
    # the venv installed); the gateway's PYTHONPATH comes from the secrets env, which wins.
    full_env["PYTHONPATH"] = str(SOURCE_ROOT)
    log = scratch / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(BIN / "hermes-runtime"), "agent", "run"],
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Entrypoint(proc, log, api_port, metrics_port, full_env)


@dataclass(frozen=True)
class Event:
    at: float
    what: str
    pid: int
    name: str


def imports(log: Path) -> list[tuple[float, int]]:
    """``(time, pid)`` of each import of ``fake_heavy`` noted in ``FAKE_IMPORT_LOG``."""
    if not log.exists():
        return []
    rows = [line.split() for line in log.read_text().splitlines() if line]
    return [(float(at), int(pid)) for at, pid in rows]


def history(data: Path) -> list[Event]:
    """The stand-in gateways' starts and ends, in the order they were written."""
    path = data / "gateway-history.log"
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        at, what, pid, name = [*line.split(), ""][:4]
        events.append(Event(float(at), what, int(pid), name))
    return events


def started(data: Path, name: str) -> list[int]:
    """PIDs of the stand-in gateways named ``name`` that started on ``data`` (empty: none)."""
    return [e.pid for e in history(data) if e.what == "start" and e.name == name]


def wait_for(predicate: Callable[[], object], timeout: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s: {what}"
        time.sleep(0.05)

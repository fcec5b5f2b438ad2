"""A real Hermes gateway (``hermes-runtime agent run``) for LCM integration tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakes.fixtures import FakeLLM
from support.net import free_port

from hermes_runtime.common.sqlite import connect

BIN = Path(sys.executable).parent
API_KEY = "lcm-turns-test-key-0123456789"


@dataclass
class Reply:
    text: str
    session_id: str  # the X-Hermes-Session-Id the API server answered with


@dataclass
class Gateway:
    """``hermes-runtime agent run`` (seeding + the Hermes gateway and its API server).

    ``start``/``stop`` can be called again on the same data directory: that is
    a pod restart as far as the agent can tell.
    """

    root: Path
    config_yaml: str
    port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)  # /ready and /metrics
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def db_path(self) -> Path:
        return self.data / "lcm.db"

    def start(self) -> None:
        etc = self.root / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(parents=True, exist_ok=True)
        (etc / "config.yaml").write_text(self.config_yaml)
        (etc / "SOUL.md").write_text("You are a test agent.\n")
        (etc / "plugins.yaml").write_text("plugins: []\n")
        secrets = self.root / "secrets.env"
        secrets.write_text(f"API_SERVER_KEY={API_KEY}\n")
        secrets.chmod(0o600)
        env = {
            **os.environ,
            "PATH": f"{BIN}:{os.environ['PATH']}",
            "HERMES_HOME": str(self.data),
            "HERMES_RUNTIME_PLUGIN_SPEC": str(etc / "plugins.yaml"),
            "HERMES_RUNTIME_SEED_CONFIG": str(etc / "config.yaml"),
            "HERMES_RUNTIME_SEED_SOUL": str(etc / "SOUL.md"),
            "HERMES_RUNTIME_SECRETS_ENV": str(secrets),
            "HERMES_RUNTIME_METRICS_PORT": str(self.metrics_port),
            "API_SERVER_HOST": "127.0.0.1",
            "API_SERVER_PORT": str(self.port),
            "HERMES_RUNTIME_GATEWAY_PORT": str(free_port()),
        }
        env.pop("API_SERVER_KEY", None)
        self.starts += 1
        log_path = self.root / f"agent-{self.starts}.log"
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(
                [str(BIN / "hermes-runtime"), "agent", "run"], env=env, stdout=log, stderr=log
            )
        deadline = time.monotonic() + 120
        while not self.healthy():
            assert self.process.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "no /health: " + log_path.read_text()[-3000:]
            time.sleep(0.3)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.port}/health", timeout=2
            ) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def gateway_pid(self) -> int | None:
        """The running gateway's PID from Hermes' ``gateway.pid`` (None: not written yet)."""
        try:
            return int(json.loads((self.data / "gateway.pid").read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def kill_gateway(self, timeout: float = 120) -> None:
        """SIGKILL the gateway (an OOM kill), and return once the supervisor's in-place
        restart wrote its PID and answers ``/health``."""
        old = self.gateway_pid()
        assert old is not None, "no gateway.pid to kill"
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while not (self.gateway_pid() not in (None, old) and self.healthy()):
            assert self.process is not None and self.process.poll() is None, "agent run exited"
            assert time.monotonic() < deadline, f"no gateway after the kill in {timeout} s"
            time.sleep(0.1)

    def chat(self, text: str, session_id: str = "", idempotency_key: str = "") -> Reply:
        """One request carrying only the new user message (history comes from the server)."""
        body = {"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}
        headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
        if session_id:
            headers["X-Hermes-Session-Id"] = session_id
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers=headers,
        )
        with urllib.request.urlopen(request, timeout=180) as response:
            payload = json.loads(response.read())
            answered_id = response.headers.get("X-Hermes-Session-Id", "")
        return Reply(str(payload["choices"][0]["message"]["content"]), answered_id)


def gateway_config(llm: FakeLLM, lcm: dict[str, Any], context_length: int = 0, **extra: Any) -> str:
    """Hermes config.yaml (JSON is YAML) pointing at the fake LLM with LCM selected.

    ``extra`` adds top-level Hermes sections (e.g. ``compression``).
    """
    model: dict[str, Any] = {
        "provider": "custom",
        "base_url": llm.base_url,
        "default": "fake-model",
        "api_key": "x",
    }
    if context_length:
        model["context_length"] = context_length
    config = {
        "model": model,
        "plugins": {"enabled": ["lcm"]},
        "context": {"engine": "lcm"},
        "lcm": {"embeddings": "off", **lcm},
        **extra,
    }
    return json.dumps(config)


def rows_when(
    db_path: Path,
    sql: str,
    done: Callable[[list[tuple[Any, ...]]], bool],
    params: tuple[Any, ...] = (),
    timeout: float = 30.0,
) -> list[tuple[Any, ...]]:
    """``stored_rows`` once ``done(rows)`` holds, or as they are at ``timeout`` (to assert on).

    The gateway's turn hook queues a turn; its writer thread commits the queue
    within ``lcm.commit_interval_ms`` (docs/lcm.md, group commit): another
    process sees a turn shortly after its reply, not at the instant it ends.
    """
    deadline = time.monotonic() + timeout
    while True:
        rows = stored_rows(db_path, sql, params)
        if done(rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def state_rows(gateway: Gateway, text: str) -> int:
    """Hermes' user messages in ``state.db`` containing ``text``."""
    rows = stored_rows(
        gateway.data / "state.db",
        "SELECT count(*) FROM messages WHERE role = 'user' AND content LIKE ?",
        (f"%{text}%",),
    )
    return int(rows[0][0]) if rows else 0


def lcm_copies(gateway: Gateway, text: str) -> int:
    """How often ``text`` occurs in LCM's user messages (a merged duplicate counts twice)."""
    rows = stored_rows(gateway.db_path, "SELECT content FROM messages WHERE role = 'user'")
    return sum(str(content).count(text) for (content,) in rows)


def stored_rows(db_path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Committed rows, read by another connection (what a crash right now would keep)."""
    if not db_path.exists():
        return []
    conn = connect(db_path, readonly=True)
    try:
        return [tuple(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()

"""Through the real Hermes API server, every plain turn is in lcm.db as soon as it is answered.

The finding this guards: API sessions never end after a turn, so before the
``post_llm_call`` hook a plain chat reached ``lcm.db`` only at compaction or
through an LCM tool, and a pod dying in between lost those turns. The agent
runs exactly as in the pod (``hermes-runtime agent run``: seeding, then the
Hermes gateway with its API server) against the deterministic fake LLM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.fixtures import FakeLLM
from support.net import free_port

from hermes_runtime.common.sqlite import connect

BIN = Path(sys.executable).parent
API_KEY = "lcm-turns-test-key-0123456789"


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def chat(port: int, text: str) -> str:
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return str(json.loads(response.read())["choices"][0]["message"]["content"])


def stored_user_messages(db_path: Path) -> list[str]:
    """What a crash right now would keep: committed rows, read by another connection."""
    if not db_path.exists():
        return []
    conn = connect(db_path, readonly=True)
    try:
        return [r[0] for r in conn.execute("SELECT content FROM messages WHERE role = 'user'")]
    finally:
        conn.close()


@pytest.fixture
def api_server(tmp_path: Path, fake_llm: FakeLLM) -> Iterator[tuple[int, Path]]:
    etc, data = tmp_path / "etc", tmp_path / "data"
    etc.mkdir()
    data.mkdir()
    (etc / "config.yaml").write_text(
        f"model: {{provider: custom, base_url: '{fake_llm.base_url}', default: fake-model,"
        " api_key: x}\n"
        "plugins: {enabled: [lcm]}\ncontext: {engine: lcm}\nlcm: {embeddings: 'off'}\n"
    )
    (etc / "SOUL.md").write_text("You are a test agent.\n")
    (etc / "plugins.yaml").write_text("plugins: []\n")
    secrets = tmp_path / "secrets.env"
    secrets.write_text(f"API_SERVER_KEY={API_KEY}\n")
    secrets.chmod(0o600)
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "HERMES_HOME": str(data),
        "HERMES_RUNTIME_PLUGIN_SPEC": str(etc / "plugins.yaml"),
        "HERMES_RUNTIME_SEED_CONFIG": str(etc / "config.yaml"),
        "HERMES_RUNTIME_SEED_SOUL": str(etc / "SOUL.md"),
        "HERMES_RUNTIME_SECRETS_ENV": str(secrets),
        "HERMES_RUNTIME_METRICS_PORT": str(free_port()),
        "API_SERVER_HOST": "127.0.0.1",
        "API_SERVER_PORT": str(port),
    }
    env.pop("API_SERVER_KEY", None)
    log_path = tmp_path / "agent.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [str(BIN / "hermes-runtime"), "agent", "run"], env=env, stdout=log, stderr=log
        )
    try:
        deadline = time.monotonic() + 120
        while not healthy(port):
            assert proc.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "no /health: " + log_path.read_text()[-3000:]
            time.sleep(0.3)
        yield port, data / "lcm.db"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_api_server_turns_are_stored_before_any_compaction_or_session_end(
    api_server: tuple[int, Path],
) -> None:
    port, db_path = api_server
    first, second = "The ferry leaves from pier amaranth-41.", "The return ferry uses pier 9."
    assert chat(port, first)
    assert stored_user_messages(db_path) == [first]
    assert chat(port, second)
    assert stored_user_messages(db_path) == [first, second]

"""Pytest fixture that runs the fake OpenAI-compatible server as a real process.

``tests/conftest.py`` loads this module as a plugin (``pytest_plugins``), so any
test just asks for the fixture::

    def test_x(fake_llm):
        url = fake_llm.base_url          # http://127.0.0.1:PORT/v1
        fake_llm.set_mode("fail")         # normal | fail | hang | garbage
        fake_llm.requests()               # chat requests the server received

Here it is a process of this interpreter, for the unit tier; the integration tier overrides
``fake_llm`` with the same server in its image (the one the e2e tier runs), shared by the
session and reset for each test (tests/integration/conftest.py).
``start_fake_llm()`` is the process without pytest (benchmarks, scripts).
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SERVER_SCRIPT = Path(__file__).with_name("openai_server.py")


def post_json(url: str, payload: dict[str, Any], headers: dict[str, str] | None = None) -> bytes:
    """POST ``payload`` as JSON (plus ``headers``) and return the response body."""
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        body: bytes = response.read()
    return body


@dataclass
class FakeLLM:
    """A running fake server: its URL plus helpers to steer and inspect it."""

    host: str
    port: int
    halt: Callable[[], None]  # ends the process or removes the container

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def _post(self, path: str, payload: dict[str, Any]) -> Any:
        return json.loads(post_json(self.root_url + path, payload))

    def set_mode(self, mode: str, hang_seconds: float = 30.0) -> None:
        self._post("/_control", {"mode": mode, "hang_seconds": hang_seconds})

    def reset(self) -> None:
        self._post("/_reset", {})

    def requests(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.root_url + "/_requests", timeout=10) as response:
            return list(json.load(response))

    def stop(self) -> None:
        self.halt()


def _terminate(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def start_fake_llm(host: str = "127.0.0.1", extra_args: list[str] | None = None) -> FakeLLM:
    """Start the server on a free port (``--port 0``) and wait for its banner line."""
    process = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), "--host", host, "--port", "0", *(extra_args or [])],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    banner = process.stdout.readline()
    if "http://" not in banner:
        process.kill()
        raise RuntimeError(f"fake OpenAI server did not start: {banner!r}")
    port = int(banner.rsplit(":", 1)[1].split("/")[0])
    return FakeLLM(host=host, port=port, halt=lambda: _terminate(process))


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    server = start_fake_llm()
    try:
        yield server
    finally:
        server.stop()

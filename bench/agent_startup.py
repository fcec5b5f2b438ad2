"""Agent entrypoint start and stop latency: `hermes-runtime agent run` to /health, SIGTERM to exit.

Usage: .venv/bin/python bench/agent_startup.py [--runs 3] [--image hermes-runtime/agent:dev]

Runs the real Hermes gateway against the fake LLM (tests/fakes/openai_server.py) on a scratch
data dir, on the host and, with --image, inside the built image (read-only root, all
capabilities dropped, UID 10000). Prints one line per measurement (median and max).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import runinfo

REPO = Path(__file__).resolve().parents[1]
KEY = "bench-key-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return json.loads(response.read()).get("status") == "ok"
    except OSError:
        return False


def wait_healthy(port: int, started: float, timeout: float = 300) -> float:
    while time.monotonic() - started < timeout:
        if healthy(port):
            return time.monotonic() - started
        time.sleep(0.05)
    raise SystemExit(f"no /health on port {port} after {timeout} s")


def scratch(root: Path, llm_port: int) -> tuple[Path, Path, Path]:
    data, etc, secrets = root / "data", root / "etc", root / "secrets"
    for path in (data, etc, secrets):
        path.mkdir(parents=True)
    (etc / "config.yaml").write_text(
        "model:\n  provider: custom\n"
        f"  base_url: http://127.0.0.1:{llm_port}/v1\n  default: fake-model\n  api_key: x\n"
    )
    (secrets / "env").write_text(f"API_SERVER_KEY={KEY}\n")
    return data, etc, secrets


def run_host(root: Path, llm_port: int) -> tuple[float, float]:
    data, etc, secrets = scratch(root, llm_port)
    api = free_port()
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "HERMES_HOME": str(data),
        "HERMES_RUNTIME_SEED_CONFIG": str(etc / "config.yaml"),
        "HERMES_RUNTIME_SECRETS_ENV": str(secrets / "env"),
        "HERMES_RUNTIME_METRICS_PORT": "0",
        "API_SERVER_HOST": "127.0.0.1",
        "API_SERVER_PORT": str(api),
        "HERMES_RUNTIME_GATEWAY_PORT": str(free_port()),
    }
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(bin_dir / "hermes-runtime"), "agent", "run"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    to_health = wait_healthy(api, started)
    stop_started = time.monotonic()
    proc.terminate()
    status = proc.wait(60)
    if status != 0:
        raise SystemExit(f"agent run exited {status} after SIGTERM")
    return to_health, time.monotonic() - stop_started


def run_image(root: Path, llm_port: int, image: str) -> tuple[float, float]:
    data, etc, secrets = scratch(root, llm_port)
    for path in (data, secrets / "env"):
        os.chown(path, 10000, 10000)
    api = free_port()
    name = f"hermes-bench-{os.getpid()}-{api}"
    started = time.monotonic()
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "--network", "host", "--read-only",
         "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--tmpfs", "/tmp",
         "-v", f"{data}:/opt/data", "-v", f"{etc}:/etc/hermes-runtime:ro",
         "-v", f"{secrets}:/run/hermes/secrets:ro",
         "-e", "HERMES_RUNTIME_SECRETS_ENV=/run/hermes/secrets/env",
         "-e", "HERMES_RUNTIME_METRICS_PORT=0", "-e", f"API_SERVER_PORT={api}",
         "-e", f"HERMES_RUNTIME_GATEWAY_PORT={free_port()}", image],
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        to_health = wait_healthy(api, started)
        stop_started = time.monotonic()
        subprocess.run(["docker", "stop", "-t", "60", name], check=True, capture_output=True)
        stopped = time.monotonic() - stop_started
        code = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.ExitCode}}", name],
            check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        if code != "0":
            raise SystemExit(f"container exited {code} after docker stop")
        return to_health, stopped
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def report(label: str, samples: list[tuple[float, float]]) -> None:
    starts, stops = [s[0] for s in samples], [s[1] for s in samples]
    print(
        f"{label}: start to /health median {statistics.median(starts):.1f} s "
        f"(max {max(starts):.1f}); SIGTERM to exit 0 median {statistics.median(stops):.1f} s "
        f"(max {max(stops):.1f}); runs {len(samples)}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--image", help="also measure inside this image (needs Docker)")
    args = parser.parse_args()
    runinfo.announce()
    with fake_llm() as llm_port, tempfile.TemporaryDirectory() as tmp:
        host = [run_host(Path(tmp) / f"host{i}", llm_port) for i in range(args.runs)]
        report("host (hermes-runtime agent run)", host)
        if args.image:
            image = [
                run_image(Path(tmp) / f"image{i}", llm_port, args.image) for i in range(args.runs)
            ]
            report(f"image ({args.image}, restricted)", image)
    return 0


@contextlib.contextmanager
def fake_llm() -> Iterator[int]:
    """The fake OpenAI server (tests/fakes/openai_server.py) on a free port, for the run."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tests/fakes/openai_server.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    sys.exit(main())

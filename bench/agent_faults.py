"""Outage and failed requests of the agent entrypoint under faults, on the host (no cluster).

Usage: .venv/bin/python bench/agent_faults.py [--kills 3] [--handovers 1] [--json]

Real `hermes-runtime agent run` with the real Hermes gateway against the fake LLM
(tests/fakes/openai_server.py); one client sends the turns of one conversation back to back
(the retrying client of tests/support/chat_load.py, shared with the e2e fault suite) and
/health is polled every 50 ms.

- kill -9: SIGKILL of the gateway process, ``--kills`` times, 3 s apart once it is back. The
  outage runs from the kill to /health answering again (restarted in place by the supervisor).
- hand-over: a second entrypoint on the same data dir (the replacement pod) waits for the
  lock; the first gets the kubelet's sequence (GET /pre-stop, then SIGTERM). The outage runs
  from SIGTERM to the second one's /health; ``overlap_s`` is how long both gateways ran at
  once (from their start and exit log lines; must be 0).

This measures the entrypoint alone; the Service and kube-proxy add their own delays on a cluster
(the e2e fault suite measures those).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from agent_startup import (  # bench/, next to us
    KEY,
    REPO,
    fake_llm,
    free_port,
    healthy,
    scratch,
    wait_healthy,
)

sys.path.insert(0, str(REPO / "tests"))
from support.chat_load import ChatClient  # shared with the e2e fault suite


def warm_up(client: ChatClient, timeout: float = 120) -> None:
    """Wait for the first answered turn (the gateway builds its agent), then count from zero."""
    deadline = time.monotonic() + timeout
    while client.ok == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    client.ok = client.failed_attempts = client.retried_turns = 0
    client.slowest_turn_s = 0.0


def local(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def start(
    data: Path, etc: Path, secrets: Path, ports: tuple[int, int], log: Path
) -> subprocess.Popen[bytes]:
    """One entrypoint with API and metrics ``ports``, its output appended to ``log``."""
    api, metrics = ports
    env = {
        **os.environ,
        "HERMES_HOME": str(data),
        "HERMES_RUNTIME_SEED_CONFIG": str(etc / "config.yaml"),
        "HERMES_RUNTIME_SECRETS_ENV": str(secrets / "env"),
        "HERMES_RUNTIME_METRICS_PORT": str(metrics),
        "HERMES_RUNTIME_TERMINATION_GRACE_SECONDS": "30",
        "HERMES_RUNTIME_PRESTOP_SECONDS": "1",
        "API_SERVER_HOST": "127.0.0.1",
        "API_SERVER_PORT": str(api),
        "HERMES_RUNTIME_GATEWAY_PORT": str(free_port()),
    }
    with open(log, "ab") as out:
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "hermes-runtime"), "agent", "run"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def gateway_pid(data: Path) -> int:
    return int(json.loads((data / "gateway.pid").read_text())["pid"])


def wait_down(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while healthy(port) and time.monotonic() < deadline:
        time.sleep(0.02)


def kill9(root: Path, llm: int, kills: int) -> dict[str, Any]:
    data, etc, secrets = scratch(root / "kill9", llm)
    api = free_port()
    agent = start(data, etc, secrets, (api, free_port()), root / "kill9.log")
    wait_healthy(api, time.monotonic())
    client = ChatClient([local(api)], KEY)
    threading.Thread(target=client.run, daemon=True).start()
    warm_up(client)
    outages = []
    try:
        for _ in range(kills):
            time.sleep(3)
            os.kill(gateway_pid(data), signal.SIGKILL)
            killed = time.monotonic()
            wait_down(api)
            outages.append(round(wait_healthy(api, killed), 2))
    finally:
        client.stop.set()
        agent.send_signal(signal.SIGTERM)
        agent.wait(60)
    return {"outages_s": outages, **client.figures()}


def spans(log: Path) -> list[tuple[float, float]]:
    """(start, stopped) wall-clock times of each gateway from the entrypoint's log lines."""
    starts, ends = [], []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record["event"] == "agent.gateway.start":
                starts.append(record["ts"])
            elif record["event"] in ("agent.gateway.stopped", "agent.gateway.exited"):
                ends.append(record["ts"])
    return list(zip(starts, ends + [float("inf")] * (len(starts) - len(ends)), strict=True))


def handover(root: Path, llm: int) -> dict[str, Any]:
    data, etc, secrets = scratch(root / "handover", llm)
    old_api, old_metrics, new_api = free_port(), free_port(), free_port()
    old = start(data, etc, secrets, (old_api, old_metrics), root / "old.log")
    wait_healthy(old_api, time.monotonic())
    new = start(data, etc, secrets, (new_api, free_port()), root / "new.log")
    url = [local(old_api)]
    client = ChatClient(url, KEY)
    threading.Thread(target=client.run, daemon=True).start()
    warm_up(client)
    with urllib.request.urlopen(f"http://127.0.0.1:{old_metrics}/pre-stop", timeout=30):
        pass
    old.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    url[0] = local(new_api)  # an instant Service switch: what remains is the entrypoint's own gap
    outage = wait_healthy(new_api, stopped)
    old.wait(60)
    client.stop.set()
    new.send_signal(signal.SIGTERM)
    new.wait(60)
    [(_, old_end)] = spans(root / "old.log")[:1]
    new_start = spans(root / "new.log")[0][0]
    return {
        "outage_s": round(outage, 2),
        "overlap_s": round(max(0.0, old_end - new_start), 3),
        **client.figures(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=3, help="kill -9 faults (default 3)")
    parser.add_argument("--handovers", type=int, default=1, help="hand-overs (default 1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with fake_llm() as llm, tempfile.TemporaryDirectory(prefix="bench-agent-faults-") as tmp:
        root = Path(tmp)
        result: dict[str, Any] = {"kill9": kill9(root, llm, args.kills)}
        runs = [handover(root / f"h{i}", llm) for i in range(args.handovers)]
        result["handover"] = runs
    if args.json:
        print(json.dumps(result))
        return
    k = result["kill9"]
    median = round(statistics.median(k["outages_s"]), 2)
    print(f"kill -9   outages {k['outages_s']} s (median {median} s), " + client_line(k))
    for run in runs:
        head = f"handover  outage {run['outage_s']} s, overlap {run['overlap_s']} s, "
        print(head + client_line(run))


def client_line(figures: dict[str, Any]) -> str:
    return (
        f"turns {figures['ok_turns']} ({figures['retried_turns']} retried, "
        f"{figures['failed_attempts']} failed attempts, slowest {figures['slowest_turn_s']} s)"
    )


if __name__ == "__main__":
    main()

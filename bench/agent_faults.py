"""Outage and failed requests of the agent entrypoint under faults, on the host (no cluster).

Usage: PYTHONPATH=tests .venv/bin/python bench/agent_faults.py [--kills 3] [--kill-interval 3]
       [--handovers 1] [--preload none] [--no-relay] [--json]

Real `hermes-runtime agent run` with the real Hermes gateway against the fake LLM
(tests/fakes/openai_server.py); one client sends the turns of one conversation back to back
(the retrying client of tests/support/chat_load.py, shared with the e2e fault suite) and
/health is polled every 50 ms.

- kill -9: SIGKILL of the gateway process, ``--kills`` times, ``--kill-interval`` s apart once
  it is back. The outage runs from the kill to /health answering again (restarted in place by
  the supervisor, which gives up at the 5th crash within 60 s: keep more kills apart).
  ``--kills 6 --kill-interval 15`` puts 7 gateway starts on one data dir within 120 s, where
  Hermes' respawn-storm breaker (turned off by the entrypoint, ``agent/gateway.py``) slept
  10 s, then 20 s before binding: the outages must not grow.
- hand-over: a second entrypoint on the same data dir (the replacement pod) waits for the
  lock; the first gets the kubelet's sequence (the exec hook `agent pre-stop`, which waits for
  the second to be warm, then SIGTERM). The outage runs from SIGTERM to the second one's /health;
  ``pre_stop_s`` is how long the hook waited for a warm successor; ``old_exit_s`` SIGTERM to
  the old gateway's exit, ``new_start_s`` the new one's lock to its /health; ``overlap_s`` is
  how long both gateways ran at once (from their start and exit log lines; must be 0). The
  client stays on the old entrypoint, which forwards it to the new one (the pod IP relay),
  until the new one answers (the Service then moves to it). ``--preload none`` turns the warm
  gateway off, ``--no-relay`` the forwarding (the client then switches to the new entrypoint
  at SIGTERM, an instant Service).

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
from pathlib import Path
from typing import Any

import runinfo
from agent_startup import (  # bench/, next to us
    KEY,
    fake_llm,
    free_port,
    healthy,
    scratch,
    wait_healthy,
)

try:  # tests/support: the client of the e2e fault suite, shared
    from support.chat_load import ChatClient
except ModuleNotFoundError as exc:
    raise runinfo.missing_test_helpers(exc) from exc


def warm_up(client: ChatClient, timeout: float = 120) -> None:
    """Wait for the first answered turn (the gateway builds its agent), then count from zero."""
    deadline = time.monotonic() + timeout
    while client.ok == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    client.ok = client.failed_attempts = client.retried_turns = 0
    client.slowest_turn_s = 0.0


def local(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def control_socket(log: Path) -> Path:
    """The control socket of the entrypoint logging to ``log`` (one per entrypoint)."""
    return log.with_suffix(".sock")


def pre_stop_hook(log: Path) -> dict[str, Any]:
    """What the kubelet runs before SIGTERM: ``hermes-runtime agent pre-stop`` (exec hook)."""
    hook = subprocess.run(
        [str(Path(sys.executable).parent / "hermes-runtime"), "agent", "pre-stop", "--json"],
        env={**os.environ, "HERMES_RUNTIME_CONTROL_SOCKET": str(control_socket(log))},
        capture_output=True,
        check=True,
        timeout=180,
    )
    return dict(json.loads(hook.stdout))


def start(
    data: Path,
    etc: Path,
    secrets: Path,
    ports: tuple[int, int],
    log: Path,
    preload: str = "",
    pod_ip: str = "",
) -> subprocess.Popen[bytes]:
    """One entrypoint with API and metrics ``ports``, its output appended to ``log``."""
    api, metrics = ports
    env = {
        **os.environ,
        "HERMES_HOME": str(data),
        "HERMES_RUNTIME_SEED_CONFIG": str(etc / "config.yaml"),
        "HERMES_RUNTIME_SECRETS_ENV": str(secrets / "env"),
        "HERMES_RUNTIME_METRICS_PORT": str(metrics),
        "HERMES_RUNTIME_TERMINATION_GRACE_SECONDS": "60",
        "HERMES_RUNTIME_PRESTOP_SECONDS": "1",
        "HERMES_RUNTIME_HANDOVER_SECONDS": "20",
        "HERMES_RUNTIME_GATEWAY_PRELOAD": preload,
        "HERMES_RUNTIME_POD_IP": pod_ip,
        # Each entrypoint's own control socket (the kubelet's exec hook talks to it).
        "HERMES_RUNTIME_CONTROL_SOCKET": str(control_socket(log)),
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


def kill9(root: Path, llm: int, kills: int, interval: float) -> dict[str, Any]:
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
            time.sleep(interval)
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


def events(log: Path, name: str) -> list[float]:
    """Wall-clock times of the entrypoint's ``name`` log events."""
    lines = log.read_text(errors="replace").splitlines()
    return [
        r["ts"]
        for r in map(json.loads, filter(lambda x: x.startswith("{"), lines))
        if r["event"] == name
    ]


def handover(root: Path, llm: int, preload: str, relay: bool) -> dict[str, Any]:
    data, etc, secrets = scratch(root / "handover", llm)
    old_api, old_metrics, new_api = free_port(), free_port(), free_port()
    old = start(data, etc, secrets, (old_api, old_metrics), root / "old.log", preload)
    wait_healthy(old_api, time.monotonic())
    url = [local(old_api)]
    client = ChatClient(url, KEY)
    threading.Thread(target=client.run, daemon=True).start()
    warm_up(client)
    # The replacement pod starts while the old one serves (RollingUpdate, or a deleted pod's
    # replacement); the preStop hook waits until it is ready to take over.
    pod_ip = "127.0.0.1" if relay else ""
    new = start(data, etc, secrets, (new_api, free_port()), root / "new.log", preload, pod_ip)
    hook_started = time.monotonic()
    successor = pre_stop_hook(root / "old.log").get("successor")
    pre_stop = time.monotonic() - hook_started
    old.send_signal(signal.SIGTERM)
    stopped, stopped_wall = time.monotonic(), time.time()
    if not relay:
        url[0] = local(new_api)  # an instant Service switch: what remains is the entrypoints' gap
    outage = wait_healthy(new_api, stopped)
    healthy_wall = time.time()
    url[0] = local(new_api)  # the Service moves to the new pod once it is ready
    old.wait(120)  # the old one forwards what reached it meanwhile, then leaves
    client.stop.set()
    new.send_signal(signal.SIGTERM)
    new.wait(60)
    [(_, old_end)] = spans(root / "old.log")[:1]
    new_start = spans(root / "new.log")[0][0]
    [acquired] = events(root / "new.log", "agent.lock.acquired")
    return {
        "outage_s": round(outage, 2),
        "load": round(os.getloadavg()[0], 1),
        "pre_stop_s": round(pre_stop, 2),
        "successor": successor,
        "old_exit_s": round(old_end - stopped_wall, 2),  # SIGTERM -> old gateway gone
        "new_start_s": round(healthy_wall - acquired, 2),  # lock -> new gateway's /health
        "overlap_s": round(max(0.0, old_end - new_start), 3),
        **client.figures(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=3, help="kill -9 faults (default 3)")
    parser.add_argument(
        "--kill-interval",
        type=float,
        default=3.0,
        help="seconds between a kill's recovery and the next kill (default 3)",
    )
    parser.add_argument("--handovers", type=int, default=1, help="hand-overs (default 1)")
    parser.add_argument(
        "--preload",
        default="",
        help="HERMES_RUNTIME_GATEWAY_PRELOAD of both entrypoints (default: the built-in list; "
        "none: no warm gateway)",
    )
    parser.add_argument(
        "--no-relay",
        action="store_true",
        help="the old entrypoint does not forward clients to the new one (no pod IP given)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    runinfo.announce()
    with fake_llm() as llm, tempfile.TemporaryDirectory(prefix="bench-agent-faults-") as tmp:
        root = Path(tmp)
        result: dict[str, Any] = {
            "kill9": kill9(root, llm, args.kills, args.kill_interval) if args.kills else {}
        }
        runs = [
            handover(root / f"h{i}", llm, args.preload, not args.no_relay)
            for i in range(args.handovers)
        ]
        result["handover"] = runs
    if args.json:
        print(json.dumps(result))
        return
    k = result["kill9"]
    if k:
        median = round(statistics.median(k["outages_s"]), 2)
        print(f"kill -9   outages {k['outages_s']} s (median {median} s), " + client_line(k))
    for run in runs:
        head = (
            f"handover  outage {run['outage_s']} s (old exit {run['old_exit_s']} s, new "
            f"start {run['new_start_s']} s; load {run['load']}), pre-stop waited "
            f"{run['pre_stop_s']} s (successor {run['successor']}), overlap {run['overlap_s']} s, "
        )
        print(head + client_line(run))


def client_line(figures: dict[str, Any]) -> str:
    return (
        f"turns {figures['ok_turns']} ({figures['retried_turns']} retried, "
        f"{figures['failed_attempts']} failed attempts, slowest {figures['slowest_turn_s']} s)"
    )


if __name__ == "__main__":
    main()

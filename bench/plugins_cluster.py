"""Benchmark: `git push` to new plugin code running in the agent, on the cluster.

Usage:
    PYTHONPATH=tests .venv/bin/python bench/plugins_cluster.py [--pushes 5] [--period 1s]
        [--git-sync auto|upstream|standin] [--kubeconfig PATH] [--json]

What it does: a fresh namespace enforcing Pod Security "restricted", the e2e backends
(tests/e2e/charts/ci-backends: Git server + fake LLM) and the chart with one plugin
(`weather`, git-sync period --period). Then, --pushes times: push a new version of the
plugin to the in-cluster Git server through a port-forward, and from inside the agent
container poll both the agent Service's /health (every 0.1 s) and the plugin's load log.
The clock starts before `git push` and stops when the new version's register() ran in the
new gateway process. Reported: seconds per push (median, max), /health probes that
failed while the reload ran (30 s client timeout), and the slowest /health answer (the
front door holds requests while the gateway restarts). The namespace is deleted at the
end (--keep keeps it).

Needs the cluster and images of `make e2e` (ci/build-images.sh, `make cluster`) or a
KUBECONFIG. The git-sync image is chosen as in the e2e suite (upstream where pullable).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import runinfo

try:  # tests/e2e: the e2e suite's cluster helpers and plugin scenario, shared
    from e2e import kube
    from e2e.test_scenario_conversation import agent_exec, service_url
    from e2e.test_scenario_plugins import (
        LOADS,
        choose_git_sync_image,
        git_remote,
        install,
        plugin_files,
    )
except ModuleNotFoundError as exc:
    raise runinfo.missing_test_helpers(exc) from exc

# Runs inside the agent container: probe /health through the Service and watch the load log
# until the new version registered and /health answered for `settle` seconds after it.
PROBE = """
import json, sys, time, urllib.request
spec = json.load(sys.stdin)
started = time.time()
probes = failures = 0
slowest = 0.0
reasons = {}
first_failure = last_failure = loaded_at = None
while time.time() - started < spec["timeout"]:
    now = time.time()
    try:
        # A client's patience (the OpenAI SDK waits 600 s): a held request is slow, not failed.
        with urllib.request.urlopen(spec["health"], timeout=30) as response:
            ok = response.status == 200
    except Exception as exc:
        ok = False
        reason = f"HTTP {exc.code}" if hasattr(exc, "code") else type(exc).__name__
        reasons[reason] = reasons.get(reason, 0) + 1
    slowest = max(slowest, time.time() - now)
    probes += 1
    if not ok:
        failures += 1
        first_failure = first_failure or now
        last_failure = now
    if loaded_at is None:
        try:
            with open(spec["loads"]) as fh:
                if spec["needle"] in fh.read():
                    loaded_at = time.time()
        except OSError:
            pass
    elif time.time() - loaded_at > spec["settle"]:
        break
    time.sleep(0.1)
print(json.dumps({"started": started, "loaded_at": loaded_at, "probes": probes,
                  "failures": failures, "first_failure": first_failure, "slowest": slowest,
                  "reasons": reasons, "last_failure": last_failure}))
"""


def probe(cluster: kube.Cluster, namespace: str, spec: dict[str, Any], out: list[Any]) -> None:
    text = agent_exec(cluster, namespace, ["python3", "-c", PROBE], json.dumps(spec))
    out.append(json.loads(text.strip().splitlines()[-1]))


def one_push(
    cluster: kube.Cluster, namespace: str, remote: Any, version: str, health: str
) -> dict[str, Any]:
    spec = {
        "health": health,
        "loads": LOADS,
        "needle": f"weather {version} ",
        "timeout": 180,
        "settle": 3,
    }
    result: list[Any] = []
    prober = threading.Thread(target=probe, args=(cluster, namespace, spec, result))
    prober.start()
    time.sleep(3)  # the prober's exec and first probes are under way before the push
    pushed = time.time()
    remote.push("weather", plugin_files("weather", version))
    prober.join()
    if not result:
        raise RuntimeError(f"the prober for v{version} gave no result")
    row = result[0]
    if row["loaded_at"] is None:
        raise RuntimeError(f"weather v{version} never ran within {spec['timeout']} s: {row}")
    return {
        "version": version,
        "push_to_running_s": round(row["loaded_at"] - pushed, 2),
        "health_probes": row["probes"],
        "health_failures": row["failures"],
        "health_down_s": round((row["last_failure"] or 0) - (row["first_failure"] or 0), 2),
        "health_slowest_s": round(row["slowest"], 2),
        "health_failure_kinds": row["reasons"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pushes", type=int, default=5)
    parser.add_argument("--period", default="1s", help="git-sync period (GITSYNC_PERIOD)")
    parser.add_argument("--git-sync", default="auto", choices=["auto", "upstream", "standin"])
    parser.add_argument("--kubeconfig", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the namespace")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    runinfo.announce()

    cluster = kube.connect(args.kubeconfig or kube.kubeconfig_from_env())
    image, line = choose_git_sync_image(cluster, args.git_sync)
    print(line, file=sys.stderr)
    namespace = kube.create_restricted_namespace(cluster, "bench-plugins")
    rows: list[dict[str, Any]] = []
    try:
        helm = kube.Helm(kubeconfig=cluster.kubeconfig, namespace=namespace)
        with tempfile.TemporaryDirectory(prefix="bench-plugins-") as tmp:
            started = time.monotonic()
            install(helm, Path(tmp), image, ["weather"], "bench", period=args.period)
            print(f"installed in {time.monotonic() - started:.0f} s", file=sys.stderr)
        health = service_url(cluster, namespace).rsplit("/v1/", 1)[0] + "/health"
        with git_remote(cluster, namespace) as remote:
            for index in range(2, args.pushes + 2):
                row = one_push(cluster, namespace, remote, str(index), health)
                print(json.dumps(row), file=sys.stderr)
                rows.append(row)
    finally:
        if not args.keep:
            kube.delete_namespace(cluster, namespace)
    seconds = [r["push_to_running_s"] for r in rows]
    summary = {
        "git_sync": line,
        "period": args.period,
        "pushes": len(rows),
        "push_to_running_median_s": round(statistics.median(seconds), 2),
        "push_to_running_max_s": max(seconds),
        "health_failures_total": sum(r["health_failures"] for r in rows),
        "health_probes_total": sum(r["health_probes"] for r in rows),
        "health_slowest_s": max(r["health_slowest_s"] for r in rows),
        "rows": rows,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"{summary['pushes']} pushes, period {args.period}: push -> new code running "
            f"median {summary['push_to_running_median_s']} s, max "
            f"{summary['push_to_running_max_s']} s; /health failures during reloads: "
            f"{summary['health_failures_total']} of {summary['health_probes_total']} probes, "
            f"slowest answer {summary['health_slowest_s']} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

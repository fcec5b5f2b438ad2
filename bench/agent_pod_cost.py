"""Benchmark: one agent pod's idle cost on the cluster, and its first `lcm_search` after idling.

Usage:
    PYTHONPATH=tests .venv/bin/python bench/agent_pod_cost.py [--embeddings e5|off]
        [--idle-release 30] [--cycles 3] [--period 5s] [--git-sync auto|upstream|standin]
        [--kubeconfig PATH] [--keep] [--json]

What it does: a fresh namespace enforcing Pod Security "restricted", the e2e backends
(tests/e2e/charts/ci-backends: Git server + fake LLM), a client pod on the control plane, and
one release of the chart with the CI values, `lcm.embeddings.mode` --embeddings,
`lcm.extraConfig.embeddings_idle_release_seconds` --idle-release, one git-sync plugin
(`weather`, period --period) and the fleet's small requests, pinned to the first worker when
the cluster has workers. A short conversation and two `lcm_search` turns load the model; then
the pod's memory is read per container from the container's own cgroup (fleet_testlib's
reading: what the kernel charges the pod for, sidecars included) with the model loaded,
20 s after the idle release, and 40 s later; the CPU time between the last two readings is
the idle CPU. The agent container's processes (the entrypoint, the gateway) are read from
/proc (VmRSS, Pss). Then --cycles times: idle past the release, one `lcm_search` turn (the
first after idle) and one more (warm), each timed by the client (the whole chat turn) and by
the LCM's own `lcm_retrieval_seconds{tool="lcm_search"}` histogram (its sum before and after
the turn, on the LCM metrics port). At the end the memory and processes with the model
loaded again. The figures are printed at the end (--json: as JSON on stdout); the namespace
is deleted (--keep keeps it).

Needs a cluster and the images of `make e2e` or `make cluster-multi` (ci/build-images.sh:
agent, git-server, fake-llm, git-sync), e.g. --kubeconfig .cache/kind-multi/kubeconfig.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import runinfo
from prometheus_client.parser import text_string_to_metric_families

try:  # tests/e2e and tests/e2e_multinode: the suites' cluster, fleet and plugin helpers, shared
    from e2e import images, kube
    from e2e.test_scenario_conversation import CHART, CI_VALUES
    from e2e.test_scenario_plugins import (
        BACKENDS_CHART,
        agent_values,
        backends_values,
        choose_git_sync_image,
    )
    from e2e_multinode import nodes_testlib as nodes
    from e2e_multinode.fleet_testlib import (
        CGROUP,
        METRICS_PORTS,
        SMALL_RESOURCES,
        Agent,
        Usage,
        chat_all,
        start_client,
        wait_client,
        wait_serving,
    )
except ModuleNotFoundError as exc:
    raise runinfo.missing_test_helpers(exc) from exc

RELEASE = "cost"
PLUGIN = "weather"
IMAGES = ["agent", "git-server", "fake-llm"]
MIB = 1 << 20
AFTER_RELEASE_S = 20  # read this long after the release is due: it has run, the heap trimmed
IDLE_CPU_S = 40  # the window of the idle CPU reading
EMBED_SETTLE_S = 8  # the agent's worker embeds the stored turns before the first search
CONVERSATION = [
    "Hello, remember that the harbour master is called Ingrid Olsen and the ferry leaves at 7.",
    "The lighthouse keeper's boat is painted green and moored at pier four.",
    "Weather notes: fog over the harbour every morning this week.",
]
SEARCH = 'Who runs the {place}? [[tool:lcm_search {{"query": "who is the harbour master"}}]]'

# Runs in the agent container: its processes' memory (not this script's own, nor its shell).
PROCESSES = r"""
import json, os
skip = {os.getpid(), os.getppid()}
rows = []
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
    if pid in skip:
        continue
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode().strip()
        status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status") if ":" in line)
        pss = {}
        for line in open(f"/proc/{pid}/smaps_rollup"):
            key = line.split(":")[0]
            if key in ("Pss", "Pss_Anon", "Pss_File"):
                pss[key] = int(line.split()[1])
    except OSError:
        continue
    rss = status.get("VmRSS", "0 kB").split()[0]
    rows.append({"pid": pid, "cmd": cmd[:120], "vmrss_kib": int(rss), **pss})
print(json.dumps(rows))
"""

# Runs in the agent container: the LCM metrics page.
METRICS = (
    "import sys, urllib.request; "
    "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"
)


def log(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)


def release_values(args: argparse.Namespace, git_sync: dict[str, Any], node: str) -> dict[str, Any]:
    """The CI values' overrides: embeddings, idle release, one plugin, small requests, a node."""
    agent: dict[str, Any] = {"resources": SMALL_RESOURCES}
    if node:
        agent["nodeSelector"] = {nodes.HOSTNAME: node}
    return {
        **images.agent_values(),
        **agent_values(git_sync, [PLUGIN], args.period),
        "lcm": {
            "embeddings": {"mode": args.embeddings},
            "extraConfig": {"embeddings_idle_release_seconds": args.idle_release},
        },
        "tests": {"enabled": False},
        "agent": agent,
    }


def install(cluster: kube.Cluster, namespace: str, values: dict[str, Any]) -> None:
    helm = kube.Helm(kubeconfig=cluster.kubeconfig, namespace=namespace)
    start_client(cluster, namespace)
    with tempfile.TemporaryDirectory(prefix="bench-pod-cost-") as tmp:
        helm.install("backends", BACKENDS_CHART, values=[backends_values(Path(tmp))], timeout="3m")
        path = Path(tmp) / "values.json"
        path.write_text(json.dumps(values), encoding="utf-8")
        started = time.monotonic()
        helm.install(RELEASE, CHART, values=[CI_VALUES, path], timeout="8m")
    log(f"installed in {time.monotonic() - started:.0f} s")


def turn(cluster: kube.Cluster, agent: Agent, text: str) -> dict[str, Any]:
    """One chat turn from the client pod: its seconds (retries included) and reply."""
    (answer,) = chat_all(cluster, [agent], text).values()
    if not answer["ok"]:
        raise RuntimeError(f"{agent.key} never answered {text!r}: {answer['errors']}")
    return answer


def containers(cluster: kube.Cluster, agent: Agent) -> list[str]:
    """The pod's long-running containers: its containers and its sidecars (git-sync)."""
    pod = cluster.core.read_namespaced_pod(agent.pod, agent.namespace)
    names = [c.name for c in pod.spec.containers]
    return names + [c.name for c in pod.spec.init_containers or [] if c.restart_policy == "Always"]


def per_container(cluster: kube.Cluster, agent: Agent) -> dict[str, Usage]:
    """Each container's cgroup reading (fleet_testlib's CGROUP script), read one by one."""
    out: dict[str, Usage] = {}
    for name in containers(cluster, agent):
        at = time.time()
        text = kube.read_in_container(
            cluster, agent.namespace, agent.pod, name, ["sh", "-c", CGROUP]
        )
        values = {
            key: int(value) for key, value in (line.split() for line in text.split("\n") if line)
        }
        working = values["usage"] - values["inactive_file"]
        out[name] = Usage(1, values["usage"], working, values["cpu_usec"], at)
    return out


def memory_mib(reading: dict[str, Usage]) -> dict[str, dict[str, float]]:
    rows = {
        name: {"usage": u.usage_bytes / MIB, "working_set": u.working_set_bytes / MIB}
        for name, u in reading.items()
    }
    rows["total"] = {
        key: sum(row[key] for row in list(rows.values())) for key in ("usage", "working_set")
    }
    return {name: {k: round(v, 1) for k, v in row.items()} for name, row in rows.items()}


def idle_cpu(before: dict[str, Usage], after: dict[str, Usage]) -> dict[str, float]:
    """Millicores per container between two readings (each over its own container's window)."""
    rows = {
        name: (after[name].cpu_usec - u.cpu_usec) / (after[name].at - u.at) / 1000
        for name, u in before.items()
    }
    rows["total"] = sum(rows.values())
    return {name: round(value, 2) for name, value in rows.items()}


def role(cmd: str) -> str:
    if "zygote.py" in cmd or "gateway_main" in cmd:
        return "gateway"
    if "embedprocess" in cmd:
        return "embedder"
    if "agent run" in cmd:
        return "init" if cmd.startswith("/usr/bin/catatonit") else "entrypoint"
    return "other"


def processes(cluster: kube.Cluster, agent: Agent) -> list[dict[str, Any]]:
    """The agent container's processes: role, VmRSS and Pss in MiB, command line."""
    text = kube.read_in_container(
        cluster, agent.namespace, agent.pod, "agent", ["python3", "-c", PROCESSES]
    )
    rows = json.loads(text.strip().splitlines()[-1])
    return [
        {
            "pid": row["pid"],
            "role": role(row["cmd"]),
            "vmrss_mib": round(row["vmrss_kib"] / 1024, 1),
            **{
                f"{k.lower()}_mib": round(row[k] / 1024, 1)
                for k in ("Pss", "Pss_Anon", "Pss_File")
                if k in row
            },
            "cmd": row["cmd"][:80],
        }
        for row in rows
    ]


def search_histogram(cluster: kube.Cluster, agent: Agent) -> tuple[float, float]:
    """`lcm_retrieval_seconds{tool="lcm_search"}`: its sum and count, from the LCM metrics port."""
    url = f"http://127.0.0.1:{METRICS_PORTS[1]}/metrics"
    text = kube.read_in_container(
        cluster, agent.namespace, agent.pod, "agent", ["python3", "-c", METRICS, url]
    )
    found = {"sum": 0.0, "count": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name != "lcm_retrieval_seconds":
            continue
        for sample in family.samples:
            kind = sample.name.rsplit("_", 1)[-1]
            if sample.labels.get("tool") == "lcm_search" and kind in found:
                found[kind] = sample.value
    return found["sum"], found["count"]


def timed_search(cluster: kube.Cluster, agent: Agent, place: str) -> dict[str, Any]:
    """An `lcm_search` turn: the turn's seconds, and the search's own (None unless exactly one
    search ran in the turn)."""
    sum_before, count_before = search_histogram(cluster, agent)
    answer = turn(cluster, agent, SEARCH.format(place=place))
    sum_after, count_after = search_histogram(cluster, agent)
    own = round(sum_after - sum_before, 3) if count_after - count_before == 1 else None
    return {"turn_s": round(answer["seconds"], 3), "lcm_search_s": own}


def search_cycles(cluster: kube.Cluster, agent: Agent, cycles: int, idle_s: float) -> list[Any]:
    """Per cycle: the first search after the model's release, and a warm one."""
    rows = []
    for cycle in range(cycles):
        if cycle:
            log(f"idle {idle_s:.0f} s for the release")
            time.sleep(idle_s)
        first = timed_search(cluster, agent, f"quay {cycle}")
        warm = timed_search(cluster, agent, f"pier {cycle}")
        log(f"cycle {cycle}: first after idle {first}, warm {warm}")
        rows.append({"first": first, "warm": warm})
    return rows


def measure(cluster: kube.Cluster, agent: Agent, args: argparse.Namespace) -> dict[str, Any]:
    for text in CONVERSATION:
        log(f"turn: {turn(cluster, agent, text)['seconds']:.2f} s")
    time.sleep(EMBED_SETTLE_S)
    for place in ("port", "docks"):  # the first loads the model
        log(f"search turn: {timed_search(cluster, agent, place)}")
    loaded = per_container(cluster, agent)
    idle_s = args.idle_release + AFTER_RELEASE_S
    log(f"idle {idle_s:.0f} s for the release")
    time.sleep(idle_s)
    released = per_container(cluster, agent)
    time.sleep(IDLE_CPU_S)
    later = per_container(cluster, agent)
    load = runinfo.load()
    released_processes = processes(cluster, agent)
    cycles = search_cycles(cluster, agent, args.cycles, idle_s)
    return {
        "memory_mib": {
            "loaded": memory_mib(loaded),
            "released": memory_mib(released),
            f"released_{IDLE_CPU_S}s_later": memory_mib(later),
            "reloaded": memory_mib(per_container(cluster, agent)),
        },
        "idle_cpu_millicores": idle_cpu(released, later),
        "load_at_idle": load,
        "processes": {"released": released_processes, "reloaded": processes(cluster, agent)},
        "search_cycles": cycles,
    }


def show(summary: dict[str, Any]) -> None:
    """The figures, as lines a person reads."""
    print(
        f"agent pod {summary['pod']} on {summary['node']}: embeddings {summary['embeddings']}, "
        f"idle release {summary['idle_release_s']} s, {summary['git_sync']}"
    )
    for label, reading in summary["memory_mib"].items():
        parts = [f"{n} {r['usage']} / {r['working_set']}" for n, r in reading.items()]
        print(f"memory {label} (usage / working set, MiB): {'; '.join(parts)}")
    cpu = "; ".join(f"{n} {v}" for n, v in summary["idle_cpu_millicores"].items())
    print(f"idle CPU over {IDLE_CPU_S} s (millicores): {cpu}")
    for label, rows in summary["processes"].items():
        parts = [
            f"{r['role']} (pid {r['pid']}) VmRSS {r['vmrss_mib']} Pss {r.get('pss_mib')}"
            for r in rows
            if r["role"] != "other"
        ]
        print(f"agent container processes, {label} (MiB): {'; '.join(parts)}")
    for index, cycle in enumerate(summary["search_cycles"]):
        first, warm = cycle["first"], cycle["warm"]
        print(
            f"cycle {index}: first lcm_search after idle: turn {first['turn_s']} s, "
            f"lcm_search {first['lcm_search_s']} s; warm: turn {warm['turn_s']} s, "
            f"lcm_search {warm['lcm_search_s']} s"
        )
    print(f"machine: load {summary['load_at_idle']} at the idle reading")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embeddings", default="e5", choices=["e5", "off"])
    parser.add_argument("--idle-release", type=float, default=30, metavar="SECONDS")
    parser.add_argument("--cycles", type=int, default=3, help="first-search-after-idle cycles")
    parser.add_argument(
        "--period", default="5s", help="git-sync period (as values-examples/ci.yaml)"
    )
    parser.add_argument("--git-sync", default="auto", choices=["auto", "upstream", "standin"])
    parser.add_argument("--kubeconfig", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the namespace")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.cycles < 1 or args.idle_release <= 0:
        parser.error("--cycles must be at least 1 and --idle-release above 0")
    runinfo.announce()

    cluster = kube.connect(args.kubeconfig or kube.kubeconfig_from_env())
    images.require(IMAGES)
    git_sync, line = choose_git_sync_image(cluster, args.git_sync)
    log(line)
    workers = nodes.workers(cluster)
    node = workers[0] if workers else ""
    namespace = kube.create_restricted_namespace(cluster, "bench-pod-cost")
    log(f"namespace {namespace}")
    try:
        install(cluster, namespace, release_values(args, git_sync, node))
        agent = wait_serving(cluster, Agent(namespace, RELEASE, node))
        wait_client(cluster, namespace)
        log(f"pod {agent.pod} on {agent.node}, containers {containers(cluster, agent)}")
        figures = measure(cluster, agent, args)
    except Exception:
        print(kube.diagnostics(cluster, namespace), file=sys.stderr)
        raise
    finally:
        if not args.keep:
            kube.delete_namespace(cluster, namespace)
    summary = {
        "embeddings": args.embeddings,
        "idle_release_s": args.idle_release,
        "git_sync": line,
        "period": args.period,
        "pod": agent.pod,
        "node": agent.node,
        **figures,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        show(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A fleet: ten releases of the chart across the workers, one namespace per team and several
releases in one namespace, as platform teams run them.

What is asserted is isolation, for every agent, from its own agent container (where a model's
shell commands run; tests/e2e_multinode/fleet_isolation_testlib.py):
- no other agent's API or metrics port connects, by Service name or by pod IP, in the same
  namespace or in another (the chart's default NetworkPolicy: the agent's egress reaches the
  DNS, its LLM and its own release's pods only);
- the Kubernetes API server cannot be reached (or refuses to list Secrets), and the API
  server's own SubjectAccessReview denies the agent's ServiceAccount the Secrets of every
  team's namespace;
- no other agent's data is visible: each agent writes a marker file on its data volume, and a
  search of each agent container's whole filesystem finds its own marker and no other;
- no backup key in the environment of any process of the agent container (by name, and the
  release's restic password by its hash).

What is measured and printed, never asserted (timings depend on the machine): the wall time of
installing all ten (`helm install --wait` of each, in parallel as a fleet tool runs them), one
chat turn answered by each agent (from a client pod in its namespace, with the release's API
key), and a `helm upgrade` of all ten that changes a pod annotation (the chart's pre-upgrade
backup runs for each) until all ten serve from new pods and answer again. Each agent pod's
cost after one conversation and a minute idle (the memory of its containers' cgroups and the
CPU they used over an idle window, as millicores) is read only with `HERMES_FLEET_COST=1`
(bench/fleet.py): its idle windows are a benchmark's, not a check's.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e import faults_testlib as lib
from e2e import images, kube
from e2e.test_scenario_conversation import CHART, CI_VALUES

from . import fleet_isolation_testlib as isolation
from . import nodes_testlib as nodes
from .fleet_testlib import (
    Agent,
    Usage,
    chat_all,
    parallel,
    release_secret_value,
    release_values,
    start_client,
    usage,
    wait_client,
    wait_serving,
)

IMAGES = ["agent", "fake-llm", "git-server"]
RELEASES_PER_TEAM = (4, 3, 3)  # ten releases: four in one team's namespace, three in two more
MEASURE_COST = os.environ.get("HERMES_FLEET_COST") == "1"  # bench/fleet.py sets it
IDLE_S = 60  # idle after the conversation before the cost is read
CPU_WINDOW_S = 40  # the idle window the CPU is measured over
MIB = 1 << 20


@pytest.fixture
def teams(
    cluster: kube.Cluster, namespace: str, request: pytest.FixtureRequest
) -> Iterator[list[str]]:
    """The scenario's namespace and two more (one per team); the extra ones' diagnostics
    printed if the test failed, then deleted."""
    extra: list[str] = []
    try:
        for _ in RELEASES_PER_TEAM[1:]:
            extra.append(kube.create_restricted_namespace(cluster, "e2e-fleet-team"))
        yield [namespace, *extra]
    finally:
        report = getattr(request.node, "rep_call", None)
        for name in extra:
            if report is None or report.failed:
                print(kube.diagnostics(cluster, name))
            kube.delete_namespace(cluster, name)


def plan(teams: list[str], workers: list[str]) -> list[Agent]:
    """Ten agents, named by team, pinned to the workers in turn (so each worker holds agents
    of every team and the probes cross nodes as well as namespaces)."""
    agents: list[Agent] = []
    for team, (namespace, count) in enumerate(zip(teams, RELEASES_PER_TEAM, strict=True)):
        for index in range(count):
            node = workers[len(agents) % 2]
            agents.append(Agent(namespace, f"agent-{'abc'[team]}{index + 1}", node))
    return agents


def helm_for(cluster: kube.Cluster, namespace: str) -> kube.Helm:
    return kube.Helm(kubeconfig=cluster.kubeconfig, namespace=namespace)


def values_file(tmp_path: Path, agent: Agent, rollout: str = "") -> Path:
    path = tmp_path / f"{agent.namespace}-{agent.release}{'-' + rollout if rollout else ''}.json"
    path.write_text(json.dumps(release_values(agent.node, rollout)))
    return path


def timed(work: Callable[[], object]) -> float:
    began = time.monotonic()
    work()
    return time.monotonic() - began


def install(cluster: kube.Cluster, agent: Agent, tmp_path: Path) -> float:
    """`helm install --wait` of one release; its seconds."""
    values = [CI_VALUES, values_file(tmp_path, agent)]
    helm = helm_for(cluster, agent.namespace)
    return timed(lambda: helm.install(agent.release, CHART, values=values, timeout="8m"))


def upgrade(cluster: kube.Cluster, agent: Agent, tmp_path: Path) -> float:
    """`helm upgrade --wait` of one release with a new pod annotation; its seconds."""
    values = [CI_VALUES, values_file(tmp_path, agent, rollout="2")]
    args = ["upgrade", agent.release, str(CHART), "--wait", "--timeout", "8m"]
    for path in values:
        args += ["--values", str(path)]
    helm = helm_for(cluster, agent.namespace)
    return timed(lambda: helm.run(*args))


def answered_by_all(answers: dict[str, dict[str, Any]], fleet: list[Agent], what: str) -> None:
    failed = {a.key: answers.get(a.key) for a in fleet if not answers.get(a.key, {}).get("ok")}
    assert not failed, f"{what}: agents that did not answer: {failed}"


def cost_table(
    fleet: list[Agent], before: list[Usage], after: list[Usage], turns: dict[str, Any]
) -> str:
    """One line per agent: node, containers, memory, working set, idle CPU, first turn."""
    lines = [
        f"{'agent':<10} {'node':<22} {'ctrs':>4} {'mem MiB':>8} {'wset MiB':>8} "
        f"{'CPU m':>6} {'turn s':>6}"
    ]
    for agent, start, end in zip(fleet, before, after, strict=True):
        cpu = (end.cpu_usec - start.cpu_usec) / (end.at - start.at) / 1000
        lines.append(
            f"{agent.release:<10} {agent.node:<22} {end.containers:>4} "
            f"{end.usage_bytes / MIB:>8.1f} "
            f"{end.working_set_bytes / MIB:>8.1f} {cpu:>6.1f} {turns[agent.key]['seconds']:>6.1f}"
        )
    memory = [u.usage_bytes / MIB for u in after]
    working = [u.working_set_bytes / MIB for u in after]
    cpus = [
        (e.cpu_usec - s.cpu_usec) / (e.at - s.at) / 1000 for s, e in zip(before, after, strict=True)
    ]
    lines.append(
        f"per agent: memory mean {statistics.mean(memory):.1f} MiB (min {min(memory):.1f}, max "
        f"{max(memory):.1f}), working set mean {statistics.mean(working):.1f} MiB, idle CPU mean "
        f"{statistics.mean(cpus):.1f} m (max {max(cpus):.1f}) over {CPU_WINDOW_S} s"
    )
    return "\n".join(lines)


def idle_cost(
    cluster: kube.Cluster, fleet: list[Agent], conversed: float, turns: dict[str, Any]
) -> str:
    """Each agent pod's memory and idle CPU, IDLE_S after the conversation, as a table."""
    time.sleep(max(0.0, conversed + IDLE_S - time.monotonic()))
    before = parallel(fleet, lambda a: usage(cluster, a))
    time.sleep(CPU_WINDOW_S)
    after = parallel(fleet, lambda a: usage(cluster, a))
    table = cost_table(fleet, before, after, turns)
    return f"idle cost after one conversation and {IDLE_S} s idle:\n{table}\n"


def probe_summary(probes: list[isolation.Probe], fleet: list[Agent]) -> str:
    """What the probes met, by kind of target over all agents (e.g. another agent's API
    Service in another namespace: 60 timeout), and what else they looked at."""
    kinds: dict[str, Counter[str]] = {}
    for found in probes:
        for name, state in found.result["connect"].items():
            kind = next((name.removeprefix(a.key) for a in fleet if name.startswith(a.key)), name)
            kinds.setdefault(kind.strip(), Counter())[state.split(":")[0]] += 1
    lines = [f"  {kind:<44} {dict(states)}" for kind, states in sorted(kinds.items())]
    markers = sorted({len(p.result["markers"]) for p in probes})
    environs = sum(p.result["processes_read"] for p in probes)
    lines.append(
        f"  marker files seen per agent {markers}; environments of {environs} processes read; "
        f"backup keys found {sorted({k for p in probes for k in p.result['env_names']})}"
    )
    return "\n".join(lines)


def isolation_breaches(cluster: kube.Cluster, fleet: list[Agent], teams: list[str]) -> list[str]:
    """Every way one agent reaches another (probes from each agent container, the API
    server's verdicts on each ServiceAccount), one line each; the probes' summary printed."""
    apiservers = isolation.apiserver_targets(cluster)
    hashes = [
        hashlib.sha256(release_secret_value(cluster, a, "RESTIC_PASSWORD").encode()).hexdigest()
        for a in fleet
    ]
    probes = parallel(
        fleet, lambda a: isolation.probe(cluster, a, fleet, apiservers, hashes), workers=5
    )
    found = [line for p in probes for line in isolation.breaches(p, fleet, apiservers)]
    print(probe_summary(probes, fleet), flush=True)
    for agent in fleet:
        found += [
            f"{agent.key}: its ServiceAccount {agent.service_account} may list Secrets of {ns}"
            for ns in teams
            if isolation.may_list_secrets(cluster, agent, ns)
        ]
    return found


@pytest.mark.timeout(900)
def test_a_fleet_of_ten_agents_is_isolated_and_measured(
    cluster: kube.Cluster, teams: list[str], tmp_path: Path
) -> None:
    images.require(IMAGES)
    workers = nodes.workers(cluster)
    assert len(workers) >= 2, f"the fleet needs two schedulable workers: {workers}"
    fleet = plan(teams, workers)
    began = time.monotonic()
    for team in teams:
        start_client(cluster, team)
    parallel(teams, lambda team: lib.install_backends(helm_for(cluster, team)))
    backends_s = time.monotonic() - began

    began = time.monotonic()
    helm_s = parallel(fleet, lambda a: install(cluster, a, tmp_path))
    fleet = parallel(fleet, lambda a: wait_serving(cluster, a))
    install_s = time.monotonic() - began
    assert {a.node for a in fleet} == set(workers[:2]), [(a.key, a.node) for a in fleet]
    for team in teams:
        wait_client(cluster, team)
    began = time.monotonic()
    turns = chat_all(cluster, fleet, "fleet turn")
    first_turns_s = time.monotonic() - began
    answered_by_all(turns, fleet, "the first turn")
    conversed = time.monotonic()
    parallel(fleet, lambda a: isolation.write_marker(cluster, a))

    cost = idle_cost(cluster, fleet, conversed, turns) if MEASURE_COST else ""

    breaches = isolation_breaches(cluster, fleet, teams)

    began = time.monotonic()
    upgrade_helm_s = parallel(fleet, lambda a: upgrade(cluster, a, tmp_path))
    helm_done_s = time.monotonic() - began
    upgraded = parallel(fleet, lambda a: wait_serving(cluster, a, old_uid=a.uid))
    ready_s = time.monotonic() - began
    again = chat_all(cluster, upgraded, "fleet turn after the upgrade")
    answered_s = time.monotonic() - began
    answered_by_all(again, upgraded, "the turn after the upgrade")

    print(
        f"\nfleet of {len(fleet)} agents in namespaces {teams} on {workers[:2]} "
        f"(backends in {backends_s:.0f} s)\n"
        f"install: all {len(fleet)} Ready in {install_s:.1f} s (helm install --wait each, in "
        f"parallel: {min(helm_s):.1f}-{max(helm_s):.1f} s); one turn each answered in "
        f"{first_turns_s:.1f} s\n"
        f"upgrade (pod annotation; pre-upgrade backup each): helm upgrades done in "
        f"{helm_done_s:.1f} s ({min(upgrade_helm_s):.1f}-{max(upgrade_helm_s):.1f} s each), all "
        f"new pods Ready {ready_s:.1f} s, all answered {answered_s:.1f} s after the start\n"
        f"{cost}"
        f"load average {os.getloadavg()}\n"
        f"isolation: {len(breaches)} breach(es)",
        flush=True,
    )
    assert not breaches, "agents reach each other:\n" + "\n".join(breaches)

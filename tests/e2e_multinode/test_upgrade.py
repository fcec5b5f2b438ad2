"""A rolling `helm upgrade` that changes the agent's pod template, under chat load, for each
kind of storage (the drain scenarios' load and checks: tests/e2e_multinode/test_drain.py).

The chart's hand-over (docs/chart.md, "Hand-over on stop") makes the old pod wait, still
serving, at most `agent.handoverWaitSeconds` for its successor to announce itself. A successor
that cannot get the volume never announces itself, so that wait would be spent for nothing;
what the clients must never see is that wait: the outage and the slowest answer are asserted
well below `handoverWaitSeconds`, with 0 answered turns lost and one gateway at a time.

- `local-path` (a node's own disk): the PV is pinned to its node, so the scheduler places the
  successor on the volume's node, where it mounts the volume at once; the hand-over is the
  single-node one.
- `shared-path` (a filesystem every node mounts), the successor sent to another node by the
  upgrade (a node affinity away from the agent's node, as a move to a new node pool does): the
  volume follows it, and the hand-over crosses nodes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from e2e import kube
from e2e.test_faults import only_new_pod_ready, serving_pod
from e2e.test_scenario_conversation import CHART, CI_VALUES, RELEASE

from . import nodes_testlib as nodes
from .test_drain import install, settle_and_check

ROLLOUT_ANNOTATION = "hermes-runtime.dev/rollout"
# The outage a hand-over may cost, as a share of handoverWaitSeconds: a successor that waited
# that wait out before serving would exceed it.
OUTAGE_SHARE = 0.5


def away_from(node: str) -> dict[str, Any]:
    """A required node affinity that keeps the agent pod off ``node``."""
    term = {"matchExpressions": [{"key": nodes.HOSTNAME, "operator": "NotIn", "values": [node]}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def handover_wait(helm: kube.Helm) -> float:
    """The release's `agent.handoverWaitSeconds`, as Helm computed it."""
    values = json.loads(helm.run("get", "values", RELEASE, "--all", "--output", "json"))
    return float(values["agent"]["handoverWaitSeconds"])


CASES = [
    pytest.param(nodes.LOCAL_CLASS, False, id="local-path"),
    pytest.param(nodes.SHARED_CLASS, True, id="shared-path-to-another-node"),
]


@pytest.mark.timeout(1200)
@pytest.mark.parametrize(("storage_class", "elsewhere"), CASES)
def test_rolling_upgrade_never_holds_clients_for_the_handover_wait(
    cluster: kube.Cluster,
    namespace: str,
    helm: kube.Helm,
    tmp_path: Path,
    gateways: nodes.GatewayWatch,
    storage_class: str,
    elsewhere: bool,
) -> None:
    # The agent pod mounts the backup volume too (backup.target.type pvc): same class.
    extra = {
        "persistence": {"storageClass": storage_class},
        "backup": {"target": {"pvc": {"storageClass": storage_class}}},
    }
    old = install(cluster, namespace, helm, tmp_path, extra, gateways)
    node = str(old.spec.node_name)
    wait = handover_wait(helm)
    change: dict[str, Any] = {"podAnnotations": {ROLLOUT_ANNOTATION: "2"}}
    if elsewhere:
        change["affinity"] = away_from(node)
    upgrade = tmp_path / "upgrade.yaml"
    upgrade.write_text(json.dumps({"agent": change}))
    start = time.time()
    began = time.monotonic()
    helm.run(
        "upgrade",
        RELEASE,
        str(CHART),
        *("--values", str(CI_VALUES), "--values", str(tmp_path / "drain.yaml")),
        *("--values", str(upgrade), "--wait", "--timeout", "5m"),
    )
    took = time.monotonic() - began
    kube.wait_until(
        lambda: only_new_pod_ready(cluster, namespace, old.metadata.uid),
        300,
        "the upgraded agent pod alone and Ready",
    )
    new = serving_pod(cluster, namespace)
    assert (new.spec.node_name != node) == elsewhere, f"{node} -> {new.spec.node_name}"
    what = f"{storage_class}{', other node' if elsewhere else ''}"
    figures, holds = settle_and_check(cluster, namespace, start, what, gateways, verb="upgrade")
    assert [h.node for h in holds[-2:]] == [node, new.spec.node_name], holds
    assert figures.outage_s < wait * OUTAGE_SHARE, (
        f"outage {figures.outage_s} s: clients waited on a hand-over of {wait} s"
    )
    assert figures.max_latency_s < wait, f"an answer took {figures.max_latency_s} s"
    handover = holds[-1].acquired - holds[-2].released
    print(
        f"  helm upgrade --wait took {took:.1f} s; {node} -> {new.spec.node_name}; lock free "
        f"for {handover:.2f} s; handoverWaitSeconds {wait:.0f}"
    )

"""Fixtures of the multi-node e2e tier: the e2e tier's own, against the multi-node cluster.

The cluster comes from `make cluster-multi` (ci/kind/multi-up.sh: a control plane and at
least two workers, the node-local class `local-path` and the shared class `shared-path`), or
any cluster `--kube-config` or KUBECONFIG names that has both classes. The scenarios cordon and
drain nodes, so they run one at a time (`make e2e-multinode` runs pytest with `-n 0`).

The fixtures are tests/e2e's (a fresh restricted namespace per scenario, diagnostics of a
failed one, Helm bound to it, the provisioner watchdog), imported by name so both tiers keep
one definition; only `kube_config` differs: its default is the multi-node cluster's kubeconfig.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e import kube
from e2e.conftest import (  # noqa: F401  (fixtures and the report hook, used by name)
    cluster,
    helm,
    namespace,
    provisioner_watchdog,
    pytest_runtest_makereport,
)

from .nodes_testlib import GatewayWatch
from .routes_testlib import wait_for_pod_routes

MULTI_KUBECONFIG = kube.REPO_ROOT / ".cache" / "kind-multi" / "kubeconfig"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="module")
def kube_config(pytestconfig: pytest.Config) -> str:
    """`--kube-config`, then KUBECONFIG, then the multi-node cluster's kubeconfig."""
    option = pytestconfig.getoption("kube_config", default=None)
    path = Path(option or os.environ.get("KUBECONFIG") or MULTI_KUBECONFIG)
    if not path.is_file():
        raise RuntimeError(f"kubeconfig {path} missing: run `make cluster-multi` or set KUBECONFIG")
    return str(path)


@pytest.fixture
def gateways(
    cluster: kube.Cluster,  # noqa: F811  (the imported fixture, by name)
    namespace: str,  # noqa: F811
    tmp_path: Path,
) -> Iterator[GatewayWatch]:
    """The scenario's agent pods' logs, followed once the scenario calls ``start()`` (after
    its install), stopped before its namespace goes; kept in ``tmp_path/agent-logs``."""
    watch = GatewayWatch(cluster, namespace, tmp_path / "agent-logs")
    yield watch
    watch.stop()


@pytest.fixture(autouse=True)
def pod_routes(request: pytest.FixtureRequest) -> None:
    """Before each scenario, every node routes every other node's pod CIDR (routes_testlib):
    a scenario started while kube-router still lacks a peering finds its agent on one worker
    unreachable from the load pod on the control plane, every pod Ready."""
    waited = wait_for_pod_routes(request.getfixturevalue("cluster"))
    if waited >= 1:
        print(f"\nwaited {waited:.0f} s for the pod routes between the nodes", flush=True)

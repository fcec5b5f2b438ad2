"""Fixtures for the end-to-end suite against the cluster KUBECONFIG names.

The cluster comes from `make cluster` (ci/cluster-up.sh) or any cluster the
caller points KUBECONFIG (or `--kube-config`) at; the `cluster` fixture holds
the connection. Every scenario gets a fresh namespace enforcing Pod Security
"restricted"; when a test fails, that namespace's pods, container logs and
events are printed before it is deleted, so a CI log is enough to debug.

Adding a scenario: request `namespace` and `helm` (bound to that namespace),
install what the scenario needs, and use `kube.run_pod` for in-cluster probes.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from . import kube


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember each phase's report on the item so fixtures can tell a failure."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    e2e_dir = Path(__file__).parent
    for item in items:
        if e2e_dir in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="module")
def kube_config(pytestconfig: pytest.Config) -> str:
    """`--kube-config`, then KUBECONFIG, then the local cluster's kubeconfig."""
    option = pytestconfig.getoption("kube_config", default=None)
    path = Path(option) if option else kube.kubeconfig_from_env()
    if not path.is_file():
        raise RuntimeError(f"kubeconfig {path} missing: run `make cluster` or set KUBECONFIG")
    return str(path)


@pytest.fixture(scope="module")
def cluster(kube_config: str) -> kube.Cluster:
    return kube.connect(Path(kube_config))


def namespace_prefix(test_name: str) -> str:
    """`e2e-<test name>`, made a DNS label; a parametrised test keeps its id at the end."""
    base, _, param = test_name.removeprefix("test_").partition("[")
    label = re.sub(r"[^a-z0-9]+", "-", base.lower())[: 40 - min(len(param), 12)].strip("-")
    if param:
        label += "-" + re.sub(r"[^a-z0-9]+", "-", param.rstrip("]").lower())[:11].strip("-")
    return f"e2e-{label}"


@pytest.fixture
def namespace(request: pytest.FixtureRequest, cluster: kube.Cluster) -> Iterator[str]:
    """A fresh restricted namespace; diagnostics printed if the test failed, then deleted."""
    name = kube.create_restricted_namespace(cluster, namespace_prefix(request.node.name))
    yield name
    report = getattr(request.node, "rep_call", None)
    if report is None or report.failed:
        print(kube.diagnostics(cluster, name))
    kube.delete_namespace(cluster, name)


@pytest.fixture
def helm(cluster: kube.Cluster, namespace: str) -> kube.Helm:
    return kube.Helm(kubeconfig=cluster.kubeconfig, namespace=namespace)


@pytest.fixture(autouse=True)
def provisioner_watchdog(request: pytest.FixtureRequest) -> Iterator[object]:
    """For a test with a namespace: kube.ProvisionerWatchdog on kind's local-path provisioner
    (HERMES_E2E_PROVISIONER_STALL_SECONDS, default 90; 0 turns it off)."""
    if "namespace" not in request.fixturenames or kube.STALL_SECONDS <= 0:
        yield None
        return
    cluster = request.getfixturevalue("cluster")
    name = request.getfixturevalue("namespace")
    with kube.ProvisionerWatchdog(cluster, name) as watchdog:
        yield watchdog

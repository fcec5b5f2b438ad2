"""NetworkPolicy per pod kind, on by default and tight; Services: metrics never leave the cluster.

The agent container runs shell commands a model decides (issue 28), so every policy is checked
for what it lets through: `reaches()` evaluates a policy's egress rules for an address outside
the cluster's selectors (the API server behind its DNAT, cloud metadata, the internet) the way a
CNI does, so "blocked" here means no rule admits it, not that some field has some value.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from chart_testlib import EXAMPLE_NAMES, FULLNAME, NAMESPACE, Manifest, pod_specs, render
from chart_testlib import render_error as helm_error

VALUES: dict[str, Any] = {
    "llm": {"baseUrl": "http://llm.internal:8000/v1", "model": "m"},
    "plugins": [
        {"name": "a", "repo": "https://git.example.com/a.git"},
        {
            "name": "b",
            "repo": "git@git.example.com:b.git",
            "auth": {"sshKeySecret": "k", "knownHosts": "h"},
        },
    ],
    "backup": {
        "target": {"type": "s3", "s3": {"bucket": "bkt", "endpoint": "http://seaweedfs:8333"}}
    },
    "vault": {
        "enabled": True,
        "address": "https://vault.secrets.svc.cluster.local:8200",
        "role": "r",
        "backupRole": "r-backup",
        "secrets": [{"path": "p", "key": "k", "env": "X"}],
    },
}
PUBLIC_LLM = {"llm": {"baseUrl": "https://api.openai.com/v1", "model": "m"}}
PRIVATE = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16"]
CLUSTER_DNS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
SAME_NAMESPACE: dict[str, Any] = {"podSelector": {}}
# Addresses the agent must never reach by default: the API server's Service and a typical
# endpoint of it (kind, kubeadm, EKS), cloud metadata, and pods/Services of the cluster.
NEVER = ["10.96.0.1", "172.18.0.2", "10.0.0.10", "192.168.49.2", "169.254.169.254", "10.244.1.7"]
POLICIES = (FULLNAME, f"{FULLNAME}-backup", f"{FULLNAME}-test", f"{FULLNAME}-secrets")
# The secrets Job's policy lets it reach the API server and nothing else (its one job).
API_CLIENTS = (f"{FULLNAME}-secrets",)


def expected_policies(manifest: Manifest) -> set[str]:
    """One policy per kind of pod the render makes: the secrets Job's only when that Job is
    rendered (not when every generated secret comes from elsewhere, as in production.yaml)."""
    jobs = {job["metadata"]["name"] for job in manifest.all("Job")}
    return {name for name in POLICIES if name not in API_CLIENTS or name in jobs}


def policy(manifest: Manifest, suffix: str = "") -> dict:
    return manifest.one("NetworkPolicy", f"{FULLNAME}{suffix}")


def merged(**sections: Any) -> dict[str, Any]:
    """VALUES with networkPolicy settings added."""
    return {**VALUES, "networkPolicy": sections}


def _ipblock_admits(peer: dict, address: str) -> bool:
    block = peer.get("ipBlock")
    if not block:
        return False
    ip = ipaddress.ip_address(address)
    net = ipaddress.ip_network(block["cidr"])
    if ip.version != net.version or ip not in net:
        return False
    return not any(ip in ipaddress.ip_network(e) for e in block.get("except", []))


def _ports_match(rule: dict, port: int, protocol: str) -> bool:
    ports = rule.get("ports")
    return not ports or any(
        p["port"] == port and p.get("protocol", "TCP") == protocol for p in ports
    )


def reaches(np: dict, address: str, port: int, protocol: str = "TCP") -> bool:
    """Whether some egress rule admits `address:port` as an address (no pod selector needed)."""
    for rule in np["spec"].get("egress", []):
        if not _ports_match(rule, port, protocol):
            continue
        peers = rule.get("to")
        if not peers or any(_ipblock_admits(peer, address) for peer in peers):
            return True
    return False


def egress_ports(np: dict, peer: dict) -> set[int]:
    """TCP ports the policy opens towards exactly `peer`."""
    return {
        p["port"]
        for rule in np["spec"]["egress"]
        if peer in rule.get("to", [])
        for p in rule.get("ports", [])
        if p["protocol"] == "TCP"
    }


def public_peers(np: dict) -> list[dict]:
    return [
        peer
        for rule in np["spec"]["egress"]
        for peer in rule.get("to", [])
        if peer.get("ipBlock", {}).get("cidr") == "0.0.0.0/0"
    ]


def agent_selector(manifest: Manifest) -> dict:
    labels = manifest.deployment["spec"]["template"]["metadata"]["labels"]
    keys = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")
    return {"matchLabels": {k: labels[k] for k in keys}}


# --- on by default, everywhere --------------------------------------------------------------


@pytest.mark.parametrize("example", ["defaults", *EXAMPLE_NAMES])
def test_every_pod_gets_a_policy_by_default_and_in_every_example(example: str) -> None:
    manifest = render(examples=() if example == "defaults" else (example,))
    names = {p["metadata"]["name"] for p in manifest.all("NetworkPolicy")}
    assert names == expected_policies(manifest), names
    for np in manifest.all("NetworkPolicy"):
        assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]


@pytest.mark.parametrize(
    ("example", "overrides"),
    [
        ("defaults", PUBLIC_LLM),
        ("defaults", VALUES),
        *[(name, None) for name in EXAMPLE_NAMES],
        ("defaults", merged(extraEgressPorts=[{"port": 25}], kubeApi={"cidrs": ["10.0.0.10/32"]})),
    ],
)
def test_no_policy_lets_the_api_server_metadata_or_cluster_addresses_through(
    example: str, overrides: dict | None
) -> None:
    manifest = render(overrides, examples=() if example == "defaults" else (example,))
    never = NEVER
    assert len(manifest.all("NetworkPolicy")) == len(expected_policies(manifest))
    for np in manifest.all("NetworkPolicy"):
        if np["metadata"]["name"] in API_CLIENTS:
            continue  # test_the_secrets_job_reaches_the_api_server_only
        for rule in np["spec"]["egress"]:
            assert rule.get("to"), (np["metadata"]["name"], rule)  # no rule to "anywhere"
        for address in never:
            for port in (443, 6443, 80, 8080):
                assert not reaches(np, address, port), (np["metadata"]["name"], address, port)


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_examples_name_each_endpoint_never_a_private_range(example: str) -> None:
    """A private range (the production example's VPC 10/8 once) holds the pods of every
    namespace: an example names its endpoints by exact address, or by namespace and pod
    labels, or as public addresses (0.0.0.0/0 less every private range)."""
    manifest = render(examples=(example,))
    for name in (FULLNAME, f"{FULLNAME}-backup"):
        for rule in policy(manifest, name.removeprefix(FULLNAME))["spec"]["egress"]:
            for peer in rule.get("to", []):
                cidr = peer.get("ipBlock", {}).get("cidr")
                if cidr is None or cidr == "0.0.0.0/0":
                    continue
                assert ipaddress.ip_network(cidr).num_addresses == 1, (example, name, cidr)


def test_every_except_lies_inside_its_cidr() -> None:
    """The API server refuses an ipBlock whose except is not a strict subset of its cidr."""
    values = merged(
        clusterCidrs=["240.0.0.0/8"],
        kubeApi={"cidrs": ["10.0.0.10/32", "203.0.113.5/32"]},
        egress={"llm": [{"ipBlock": {"cidr": "172.16.0.0/12"}}]},
        extraEgress=[{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 25}]}],
    )
    for manifest in [render(values), *[render(examples=(n,)) for n in EXAMPLE_NAMES]]:
        for np in manifest.all("NetworkPolicy"):
            for rule in np["spec"]["egress"]:
                for peer in rule.get("to", []):
                    block = peer.get("ipBlock")
                    if not block:
                        continue
                    net = ipaddress.ip_network(block["cidr"])
                    for entry in block.get("except", []):
                        inner = ipaddress.ip_network(entry)
                        assert inner.subnet_of(net) and inner != net, block  # type: ignore[arg-type]


# --- DNS ------------------------------------------------------------------------------------


def _dns_rules(np: dict) -> list[dict]:
    return [r for r in np["spec"]["egress"] if any(p["port"] == 53 for p in r.get("ports", []))]


def test_dns_goes_only_to_the_cluster_dns_pods() -> None:
    manifest = render(VALUES)
    for name in set(POLICIES) - set(API_CLIENTS):
        (rule,) = _dns_rules(manifest.one("NetworkPolicy", name))
        assert rule["to"] == [CLUSTER_DNS], name
        assert {(p["port"], p["protocol"]) for p in rule["ports"]} == {(53, "UDP"), (53, "TCP")}
        assert not reaches(manifest.one("NetworkPolicy", name), "8.8.8.8", 53, "UDP")


def test_dns_namespace_labels_and_node_local_address_are_values() -> None:
    peers = [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "dns"}},
            "podSelector": {"matchLabels": {"app": "coredns"}},
        },
        {"ipBlock": {"cidr": "169.254.20.10/32"}},  # node-local DNS
    ]
    manifest = render(merged(dns={"to": peers}))
    for name in set(POLICIES) - set(API_CLIENTS):  # the secrets Job needs no DNS
        np = manifest.one("NetworkPolicy", name)
        (rule,) = _dns_rules(np)
        assert rule["to"] == peers
        assert reaches(np, "169.254.20.10", 53, "UDP")
        assert not reaches(np, "169.254.169.254", 80)  # only port 53 of that one address


# --- egress to the endpoints ----------------------------------------------------------------


def test_public_llm_is_reached_on_its_port_at_public_addresses_only() -> None:
    np = policy(render(PUBLIC_LLM))
    assert reaches(np, "104.18.7.192", 443)
    assert not reaches(np, "104.18.7.192", 80)
    (peer,) = public_peers(np)
    assert peer["ipBlock"]["except"] == PRIVATE


def test_each_endpoint_goes_to_the_peer_its_host_stands_for() -> None:
    values = {
        **VALUES,
        "llm": {"baseUrl": "http://fake-llm:8080/v1", "model": "m"},
        "lcm": {
            "embeddings": {
                "mode": "openai",
                "baseUrl": "http://emb.ml.svc.cluster.local:8001/v1",
                "model": "e",
                "dim": 8,
            }
        },
        "backup": {
            "mode": "sidecar",  # the agent pod backs up itself: it reaches S3
            "target": {"type": "s3", "s3": {"bucket": "bkt", "endpoint": "http://10.9.8.7"}},
        },
    }
    np = policy(render(values))
    (public,) = public_peers(np)
    assert egress_ports(np, public) == {443, 22}  # the two plugin repos on git.example.com
    assert egress_ports(np, SAME_NAMESPACE) == {8080}  # fake-llm: a Service of this namespace
    ml = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ml"}}}
    assert egress_ports(np, ml) == {8001}  # embeddings: a Service of namespace ml
    secrets = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "secrets"}}}
    assert egress_ports(np, secrets) == {8200}  # Vault
    assert egress_ports(np, {"ipBlock": {"cidr": "10.9.8.7/32"}}) == {80}  # S3 by address
    assert reaches(np, "10.9.8.7", 80) and not reaches(np, "10.9.8.8", 80)


@pytest.mark.parametrize(
    ("overrides", "s3"),
    [
        ({}, False),  # backups by CronJob: the bucket is the backup pod's alone
        ({"backup": {"mode": "sidecar"}}, True),
        ({"backup": {"continuous": {"enabled": True}}}, True),
        ({"restore": {"fromSnapshot": "latest"}}, True),
        ({"backup": {"enabled": False}}, False),
    ],
)
def test_the_agent_pod_reaches_the_bucket_only_when_a_container_of_its_own_needs_it(
    overrides: dict, s3: bool
) -> None:
    """The agent container's shell must not be a way to the backups: S3 egress only for a
    restore, the replication or the sidecar backup; the backup pod's policy always has it."""
    target = {"type": "s3", "s3": {"bucket": "bkt", "endpoint": "http://10.9.8.7:8333"}}
    backup = {**overrides.get("backup", {}), "target": target}
    manifest = render({**overrides, "backup": backup})
    assert reaches(policy(manifest), "10.9.8.7", 8333) is s3
    if manifest.has("CronJob"):
        assert reaches(policy(manifest, "-backup"), "10.9.8.7", 8333)


def test_the_agent_pod_reaches_vault_only_when_it_runs_a_vault_container() -> None:
    vault = {
        "enabled": True,
        "address": "https://10.7.7.7:8200",
        "role": "r",
        "backupRole": "r-backup",
        "secrets": [{"path": "p", "key": "k", "env": "AWS_ACCESS_KEY_ID"}],  # backup's only
    }
    backup = {"target": {"type": "s3", "s3": {"bucket": "bkt", "existingSecret": ""}}}
    only_backup = render({"vault": vault, "backup": backup})
    assert not reaches(policy(only_backup), "10.7.7.7", 8200)
    assert reaches(policy(only_backup, "-backup"), "10.7.7.7", 8200)
    for_agent = {**vault, "secrets": [{"path": "p", "key": "k", "env": "OPENAI_API_KEY"}]}
    assert reaches(policy(render({"vault": for_agent})), "10.7.7.7", 8200)


def test_endpoint_peers_from_values_replace_the_derived_ones_per_endpoint() -> None:
    gateway = {"ipBlock": {"cidr": "10.20.0.0/16"}}
    np = policy(render(merged(egress={"llm": [gateway]})))
    assert egress_ports(np, gateway) == {8000}  # only the LLM's port
    (public,) = public_peers(np)
    assert egress_ports(np, public) == {443, 22}  # Git keeps its derived peer
    assert reaches(np, "10.20.3.4", 8000) and not reaches(np, "10.20.3.4", 443)


def test_a_given_ipblock_never_covers_metadata_cluster_cidrs_or_the_api_server() -> None:
    values = merged(
        clusterCidrs=["240.0.0.0/8"],
        kubeApi={"cidrs": ["10.0.0.10/32", "172.18.0.2/32"]},
        egress={
            "llm": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["192.168.0.0/16"]}}],
            "git": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
        },
        extraEgress=[{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 25}]}],
    )
    np = policy(render(values))
    for address in ("169.254.169.254", "240.1.2.3", "10.0.0.10", "172.18.0.2"):
        for port in (8000, 25):
            assert not reaches(np, address, port), (address, port)
    assert not reaches(np, "192.168.1.1", 8000)  # the except written in values stays
    assert not reaches(np, "10.0.0.10", 443)  # the API server inside the Git block
    assert reaches(np, "10.0.0.11", 443) and reaches(np, "172.18.0.3", 8000)


def test_the_api_server_is_reached_only_when_a_value_asks() -> None:
    # A managed cluster's API server on a public address (203.0.113.5:443): public HTTPS (the
    # Git host here) would reach it, unless kubeApi.cidrs names it.
    assert reaches(policy(render(VALUES)), "203.0.113.5", 443)
    api = {"cidrs": ["203.0.113.5/32", "172.18.0.2/32"]}
    np = policy(render(merged(kubeApi=api)))
    assert not reaches(np, "203.0.113.5", 443) and reaches(np, "203.0.113.6", 443)
    assert not reaches(np, "172.18.0.2", 6443)
    np = policy(render(merged(kubeApi={**api, "allow": True})))
    assert reaches(np, "172.18.0.2", 6443) and reaches(np, "203.0.113.5", 443)
    assert not reaches(np, "172.18.0.2", 22)
    backup = policy(render(merged(kubeApi={**api, "allow": True})), "-backup")
    assert not reaches(backup, "172.18.0.2", 6443)  # the agent pod only
    error = helm_error(merged(kubeApi={"allow": True}))
    assert "networkPolicy.kubeApi.cidrs" in error and "endpoints kubernetes" in error, error


def test_extra_egress_ports_keep_their_protocol_and_go_to_public_addresses() -> None:
    np = policy(render(merged(extraEgressPorts=[{"port": 123, "protocol": "UDP"}])))
    assert reaches(np, "162.159.200.1", 123, "UDP")
    assert not reaches(np, "162.159.200.1", 123, "TCP")
    assert not reaches(np, "10.1.1.1", 123, "UDP")


def test_backup_pods_get_dns_s3_and_vault_only() -> None:
    np = policy(render(VALUES), "-backup")
    assert np["spec"]["ingress"] == []
    ports = {p["port"] for rule in np["spec"]["egress"] for p in rule["ports"]}
    assert ports == {53, 8333, 8200}
    assert egress_ports(np, SAME_NAMESPACE) == {8333}  # S3 at Service seaweedfs


def test_the_agent_may_reach_its_successor_pod_during_a_hand_over() -> None:
    manifest = render({**VALUES, "metrics": {"enabled": False}})
    np = policy(manifest)
    assert egress_ports(np, {"podSelector": agent_selector(manifest)}) == {8642, 9090}
    # With LCM's metrics on, an agent pod reads them through the metrics Service (its own pod).
    assert egress_ports(policy(render(VALUES)), {"podSelector": agent_selector(manifest)}) == {
        8642,
        9090,
        9091,
    }
    ingress = np["spec"]["ingress"][0]
    assert {"podSelector": agent_selector(manifest)} in ingress["from"]
    assert {p["port"] for p in ingress["ports"]} == {8642, 9090}  # /ready even without metrics


# --- ingress --------------------------------------------------------------------------------


def _admitted(np: dict, port: int) -> list[Any]:
    """The `from` lists of the ingress rules that open `port` (None: from anywhere)."""
    return [rule.get("from") for rule in np["spec"]["ingress"] if _ports_match(rule, port, "TCP")]


def test_by_default_the_api_port_admits_the_namespace_and_metrics_only_the_release() -> None:
    manifest = render({**VALUES, "lcm": {"enabled": True}})
    np = policy(manifest)
    agent = {"podSelector": agent_selector(manifest)}
    test_pod = {"podSelector": {"matchLabels": {**agent["podSelector"]["matchLabels"]}}}
    test_pod["podSelector"]["matchLabels"]["app.kubernetes.io/component"] = "test"
    assert _admitted(np, 8642) == [[agent, test_pod], [SAME_NAMESPACE]]
    assert _admitted(np, 9090) == [[agent, test_pod]]  # no namespace-wide scraping
    assert _admitted(np, 9091) == [[agent, test_pod]]  # LCM metrics: the release's pods only
    assert _admitted(np, 8081) == []  # git-sync's HTTP port: the kubelet only (from the node)


def test_metrics_ports_admit_the_named_monitoring_peers() -> None:
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}}}
    np = policy(render({**VALUES, "networkPolicy": {"ingress": {"metricsFrom": [monitoring]}}}))
    assert [monitoring] in _admitted(np, 9090) and [monitoring] in _admitted(np, 9091)
    assert [monitoring] not in _admitted(np, 8642)


def test_clients_mode_admits_labelled_pods_and_listed_peers() -> None:
    peer = {"namespaceSelector": {"matchLabels": {"team": "ops"}}}
    manifest = render(merged(ingress={"api": "clients", "apiFrom": [peer]}))
    callers = _admitted(policy(manifest), 8642)[1]
    assert callers == [{"podSelector": {"matchLabels": {f"{FULLNAME}-client": "true"}}}, peer]
    assert manifest.one("Pod")["metadata"]["labels"][f"{FULLNAME}-client"] == "true"


def test_any_mode_opens_the_api_port_but_not_the_metrics_port() -> None:
    np = policy(render(merged(ingress={"api": "any"})))
    assert None in _admitted(np, 8642)
    assert None not in _admitted(np, 9090)


def test_helm_test_pod_may_reach_the_agent_and_the_agent_admits_it() -> None:
    manifest = render(merged(ingress={"api": "clients"}))
    test_pod = manifest.one("Pod")
    np = policy(manifest, "-test")
    assert np["spec"]["ingress"] == []
    agent = {"podSelector": agent_selector(manifest)}
    assert egress_ports(np, agent) == {8642, 9090}
    assert len(np["spec"]["egress"]) == 2  # DNS and the agent, nothing else
    # The test pod's URLs use exactly those ports.
    urls = test_pod["spec"]["containers"][0]["args"][3:]  # after python3 -c SCRIPT
    assert [u.split(":")[2].split("/")[0] for u in urls] == ["8642", "9090"]
    (release_rule,) = [r for r in policy(manifest)["spec"]["ingress"] if agent in r["from"]]
    (tested,) = [p for p in release_rule["from"] if p != agent]
    assert tested["podSelector"]["matchLabels"].items() <= test_pod["metadata"]["labels"].items()


# --- values refused -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("allowExternal", "networkPolicy.ingress.api"),
        ("ingressFrom", "networkPolicy.ingress.apiFrom"),
        ("egressTo", "networkPolicy.egress.llm"),
    ],
)
def test_replaced_keys_are_refused_naming_the_new_one(old: str, new: str) -> None:
    error = helm_error({"networkPolicy": {old: [] if old != "allowExternal" else False}})
    assert f"networkPolicy.{old}" in error and new in error, error


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"ingress": {"api": "open"}}, "/networkPolicy/ingress/api"),
        ({"clusterCidrs": ["10.0.0.0"]}, "/networkPolicy/clusterCidrs/0"),
        ({"egress": {"llm": [{"ipBlock": {"cidr": "1.2.3.4/32"}, "podSelector": {}}]}}, "llm/0"),
        ({"egress": {"s3": [{"hostname": "s3.example.com"}]}}, "/networkPolicy/egress/s3/0"),
        ({"dns": {"to": []}}, "/networkPolicy/dns/to"),
    ],
)
def test_schema_refuses_bad_network_values(section: dict, field: str) -> None:
    error = helm_error({"networkPolicy": section})
    assert "values don't meet the specifications of the schema" in error and field in error


# --- selection and Services -----------------------------------------------------------------


def _selects(np: dict, labels: dict) -> bool:
    return np["spec"]["podSelector"]["matchLabels"].items() <= labels.items()


def _pod_labels(manifest: Manifest) -> dict[str, dict]:
    """Labels of every pod the chart makes, by workload."""
    labels = {}
    for obj in manifest.objects:
        kind = obj["kind"]
        if kind == "Pod":
            labels["Pod/" + obj["metadata"]["name"]] = obj["metadata"]["labels"]
        elif kind == "CronJob":
            template = obj["spec"]["jobTemplate"]["spec"]["template"]
            labels["CronJob/" + obj["metadata"]["name"]] = template["metadata"]["labels"]
        elif kind in ("Deployment", "Job"):
            labels[f"{kind}/" + obj["metadata"]["name"]] = obj["spec"]["template"]["metadata"][
                "labels"
            ]
    return labels


def test_each_pod_is_selected_by_exactly_its_own_policy() -> None:
    """The agent policy must not catch the helm test or backup pods (issue 13)."""
    manifest = render(VALUES)
    policies = manifest.all("NetworkPolicy")
    pods = _pod_labels(manifest)
    # agent, backup, verify, pre-upgrade backup, helm test, secrets Job
    assert len(pods) == len(list(pod_specs(manifest))) == 6, pods
    for workload, labels in pods.items():
        chosen = [p["metadata"]["name"] for p in policies if _selects(p, labels)]
        component = labels["app.kubernetes.io/component"]
        expected = FULLNAME if component == "agent" else f"{FULLNAME}-{component}"
        assert chosen == [expected], (workload, chosen)
        assert all(p["metadata"]["namespace"] == NAMESPACE for p in policies)


def test_backup_policy_absent_without_backup_pods_and_all_absent_when_off() -> None:
    names = {
        p["metadata"]["name"]
        for p in render({**VALUES, "backup": {"mode": "sidecar"}, "tests": {"enabled": False}}).all(
            "NetworkPolicy"
        )
    }
    assert names == {FULLNAME, f"{FULLNAME}-secrets"}  # the restic password is still generated
    given = render(
        {
            **VALUES,
            "apiServer": {"existingSecret": "mine"},
            "backup": {"mode": "sidecar", "repository": {"existingSecret": "restic"}},
            "tests": {"enabled": False},
        }
    )
    assert {p["metadata"]["name"] for p in given.all("NetworkPolicy")} == {FULLNAME}
    assert not render({"networkPolicy": {"enabled": False}}).has("NetworkPolicy")


def test_the_secrets_job_reaches_the_api_server_only() -> None:
    """No ingress, no DNS (it dials KUBERNETES_SERVICE_HOST, an address), the API server's
    ports; with kubeApi.cidrs only those addresses, without them private addresses only (never
    a public one, never cloud metadata)."""
    np = policy(render(), "-secrets")
    assert np["spec"]["ingress"] == []
    (rule,) = np["spec"]["egress"]
    assert rule["ports"] == [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]
    assert reaches(np, "172.18.0.2", 6443)  # kind's API server
    for address in ("8.8.8.8", "203.0.113.5", "169.254.169.254"):
        assert not reaches(np, address, 443), address
    assert not reaches(np, "10.96.0.10", 53, "UDP")
    narrowed = policy(
        render({"networkPolicy": {"kubeApi": {"cidrs": ["10.0.0.10/32"]}}}), "-secrets"
    )
    assert reaches(narrowed, "10.0.0.10", 6443)
    for address in ("10.0.0.11", "172.18.0.2", "169.254.169.254", "8.8.8.8"):
        assert not reaches(narrowed, address, 443), address


def test_metrics_have_their_own_cluster_ip_service() -> None:
    manifest = render({"service": {"type": "LoadBalancer"}})
    api = manifest.one("Service", FULLNAME)
    metrics = manifest.one("Service", f"{FULLNAME}-metrics")
    assert api["spec"]["type"] == "LoadBalancer"
    assert [p["name"] for p in api["spec"]["ports"]] == ["http"]
    assert metrics["spec"]["type"] == "ClusterIP"
    assert [p["port"] for p in metrics["spec"]["ports"]] == [9090, 9091]
    assert metrics["spec"]["selector"].items() <= (
        manifest.deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    assert not render({"metrics": {"enabled": False}}).all("Service")[1:]

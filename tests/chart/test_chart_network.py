"""NetworkPolicy per pod kind, and Services: metrics never leave the cluster by service.type."""

from __future__ import annotations

from chart_testlib import FULLNAME, Manifest, pod_specs, render

VALUES = {
    "networkPolicy": {"enabled": True},
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
        "address": "https://vault:8200",
        "role": "r",
        "secrets": [{"path": "p", "key": "k", "env": "X"}],
    },
}


def _egress_ports(policy: dict) -> set[tuple[int, str]]:
    """Egress ports to anything but the agent pods themselves (the hand-over's rule)."""
    return {
        (port["port"], port["protocol"])
        for rule in policy["spec"]["egress"]
        if not _to_agent_pods(rule)
        for port in rule.get("ports", [])
    }


def _to_agent_pods(rule: dict) -> bool:
    peers = rule.get("to", [])
    return any(
        p.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component")
        == "agent"
        for p in peers
    )


def test_off_by_default() -> None:
    assert not render().has("NetworkPolicy")


def test_egress_allows_dns_and_the_ports_of_every_endpoint() -> None:
    policy = render(VALUES).one("NetworkPolicy", FULLNAME)
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    ports = _egress_ports(policy)
    assert {(53, "UDP"), (53, "TCP")} <= ports
    # LLM 8000, https Git 443, ssh Git 22, S3 endpoint 8333, Vault 8200 and nothing else.
    assert {p for p, proto in ports if proto == "TCP"} == {53, 8000, 443, 22, 8333, 8200}


def test_ingress_limited_to_api_and_metrics_ports() -> None:
    policy = render(VALUES).one("NetworkPolicy", FULLNAME)
    (rule,) = policy["spec"]["ingress"]
    assert {p["port"] for p in rule["ports"]} == {8642, 9090, 9091}
    assert "from" not in rule  # allowExternal: any pod may call the API port


def test_closed_ingress_admits_client_pods_and_listed_peers() -> None:
    peer = {"namespaceSelector": {"matchLabels": {"team": "ops"}}}
    values = {
        **VALUES,
        "networkPolicy": {"enabled": True, "allowExternal": False, "ingressFrom": [peer]},
    }
    manifest = render(values)
    (rule,) = manifest.one("NetworkPolicy", FULLNAME)["spec"]["ingress"]
    assert rule["from"][0] == {"podSelector": {"matchLabels": {f"{FULLNAME}-client": "true"}}}
    agent_labels = manifest.deployment["spec"]["template"]["metadata"]["labels"]
    # The pod being replaced forwards new clients to its successor.
    assert rule["from"][1]["podSelector"]["matchLabels"].items() <= agent_labels.items()
    assert rule["from"][2] == peer
    test_pod = manifest.one("Pod")
    assert test_pod["metadata"]["labels"][f"{FULLNAME}-client"] == "true"


def test_the_agent_may_reach_its_successor_pod_during_a_hand_over() -> None:
    manifest = render(VALUES)
    egress = manifest.one("NetworkPolicy", FULLNAME)["spec"]["egress"]
    (rule,) = [r for r in egress if _to_agent_pods(r)]
    agent_labels = manifest.deployment["spec"]["template"]["metadata"]["labels"]
    (peer,) = rule["to"]
    assert peer["podSelector"]["matchLabels"].items() <= agent_labels.items()
    assert {(p["port"], p["protocol"]) for p in rule["ports"]} == {(8642, "TCP"), (9090, "TCP")}


def test_egress_destinations_can_be_narrowed() -> None:
    block = {"ipBlock": {"cidr": "10.0.0.0/8"}}
    values = {**VALUES, "networkPolicy": {"enabled": True, "egressTo": [block]}}
    egress = render(values).one("NetworkPolicy", FULLNAME)["spec"]["egress"]
    assert "to" not in egress[0]  # DNS stays open
    assert egress[1]["to"] == [block]


def test_policy_selects_the_agent_pod() -> None:
    manifest = render(VALUES)
    selector = manifest.one("NetworkPolicy", FULLNAME)["spec"]["podSelector"]["matchLabels"]
    labels = manifest.deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()


def _selects(policy: dict, labels: dict) -> bool:
    return policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()


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
        elif kind == "Deployment":
            labels["Deployment/" + obj["metadata"]["name"]] = obj["spec"]["template"]["metadata"][
                "labels"
            ]
    return labels


def test_each_pod_is_selected_by_exactly_its_own_policy() -> None:
    """The agent policy must not catch the helm test or backup pods (issue 13)."""
    manifest = render(VALUES)
    policies = manifest.all("NetworkPolicy")
    pods = _pod_labels(manifest)
    assert len(pods) == len(list(pod_specs(manifest))) == 3, pods
    for workload, labels in pods.items():
        chosen = [p["metadata"]["name"] for p in policies if _selects(p, labels)]
        component = labels["app.kubernetes.io/component"]
        expected = FULLNAME if component == "agent" else f"{FULLNAME}-{component}"
        assert chosen == [expected], (workload, chosen)


def test_helm_test_pod_may_reach_the_agent_and_the_agent_admits_it() -> None:
    values = {**VALUES, "networkPolicy": {"enabled": True, "allowExternal": False}}
    manifest = render(values)
    test_pod = manifest.one("Pod")
    agent_labels = manifest.deployment["spec"]["template"]["metadata"]["labels"]
    egress = manifest.one("NetworkPolicy", f"{FULLNAME}-test")["spec"]["egress"]
    to_agent = [r for r in egress if r.get("to")]
    assert len(to_agent) == 1
    assert to_agent[0]["to"][0]["podSelector"]["matchLabels"].items() <= agent_labels.items()
    assert {p["port"] for p in to_agent[0]["ports"]} == {8642, 9090}
    # The test pod's URLs use exactly those ports.
    urls = test_pod["spec"]["containers"][0]["args"][3:]  # after python3 -c SCRIPT
    assert [u.split(":")[2].split("/")[0] for u in urls] == ["8642", "9090"]
    # The agent's closed ingress lets the test pod in by its client label.
    (rule,) = manifest.one("NetworkPolicy", FULLNAME)["spec"]["ingress"]
    client = rule["from"][0]["podSelector"]["matchLabels"]
    assert client.items() <= test_pod["metadata"]["labels"].items()


def test_backup_pods_get_dns_s3_and_vault_only() -> None:
    policy = render(VALUES).one("NetworkPolicy", f"{FULLNAME}-backup")
    assert policy["spec"]["ingress"] == []
    assert {p for p, proto in _egress_ports(policy) if proto == "TCP"} == {53, 8333, 8200}


def test_backup_policy_absent_without_backup_pods() -> None:
    names = {
        p["metadata"]["name"]
        for p in render({**VALUES, "backup": {"mode": "sidecar"}, "tests": {"enabled": False}}).all(
            "NetworkPolicy"
        )
    }
    assert names == {FULLNAME}


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

"""NetworkPolicy: ingress to the API and metrics ports; egress to DNS and derived ports."""

from __future__ import annotations

from chart_testlib import FULLNAME, render

VALUES = {
    "networkPolicy": {"enabled": True},
    "llm": {"baseUrl": "http://llm.internal:8000/v1"},
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
    return {
        (port["port"], port["protocol"])
        for rule in policy["spec"]["egress"]
        for port in rule.get("ports", [])
    }


def test_off_by_default() -> None:
    assert not render().has("NetworkPolicy")


def test_egress_allows_dns_and_the_ports_of_every_endpoint() -> None:
    policy = render(VALUES).one("NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    ports = _egress_ports(policy)
    assert {(53, "UDP"), (53, "TCP")} <= ports
    # LLM 8000, https Git 443, ssh Git 22, S3 endpoint 8333, Vault 8200 and nothing else.
    assert {p for p, proto in ports if proto == "TCP"} == {53, 8000, 443, 22, 8333, 8200}


def test_ingress_limited_to_api_and_metrics_ports() -> None:
    policy = render(VALUES).one("NetworkPolicy")
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
    (rule,) = manifest.one("NetworkPolicy")["spec"]["ingress"]
    assert rule["from"][0] == {"podSelector": {"matchLabels": {f"{FULLNAME}-client": "true"}}}
    assert rule["from"][1] == peer
    test_pod = manifest.one("Pod")
    assert test_pod["metadata"]["labels"][f"{FULLNAME}-client"] == "true"


def test_egress_destinations_can_be_narrowed() -> None:
    block = {"ipBlock": {"cidr": "10.0.0.0/8"}}
    values = {**VALUES, "networkPolicy": {"enabled": True, "egressTo": [block]}}
    egress = render(values).one("NetworkPolicy")["spec"]["egress"]
    assert "to" not in egress[0]  # DNS stays open
    assert egress[1]["to"] == [block]


def test_policy_selects_the_agent_pod() -> None:
    manifest = render(VALUES)
    selector = manifest.one("NetworkPolicy")["spec"]["podSelector"]["matchLabels"]
    labels = manifest.deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()

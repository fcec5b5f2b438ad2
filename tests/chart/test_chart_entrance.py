"""The entrance: an opt-in Ingress or Gateway API HTTPRoute to the agent's API port.

Each renders only when asked, points at the Service's API port (never the unauthenticated
metrics), and the agent's NetworkPolicy lets in the pods that forward to it: without them
the policy would drop every request. The Ingress is checked against Kubernetes' own schema
(kubernetes-validate); the HTTPRoute is a CRD, so its shape is checked here against the
rules of Gateway API v1.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from chart_testlib import FULLNAME, NEWEST_KUBE, OLDEST_KUBE, Manifest, render, render_error
from kubernetes_validate import validate
from kubernetes_validate.utils import ValidationError

HTTPROUTE_API = "gateway.networking.k8s.io/v1/HTTPRoute"
HOST = "hermes.example.com"
NGINX = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
ENVOY = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway"}}}
GATEWAY = {"name": "public", "namespace": "gateway-system", "sectionName": "https"}

INGRESS: dict[str, Any] = {
    "enabled": True,
    "className": "nginx",
    "hosts": [HOST, "agents.example.com"],
    "tls": [{"secretName": "hermes-tls", "hosts": [HOST]}],
    "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
    "labels": {"team": "platform"},
    "controllerFrom": [NGINX],
}
ROUTE: dict[str, Any] = {
    "enabled": True,
    "parentRefs": [GATEWAY],
    "hostnames": [HOST],
    "timeouts": {"request": "600s"},
    "annotations": {"team": "platform"},
    "gatewayFrom": [ENVOY],
}

# Gateway API v1 (standard channel) rules of the HTTPRoute fields the chart writes.
GATEWAY_HOSTNAME = re.compile(
    r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
GATEWAY_DURATION = re.compile(r"^([0-9]{1,5}(h|m|s|ms)){1,4}$")
SECTION_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def route_render(route: dict[str, Any] | None = None, **values: Any) -> Manifest:
    return render({"httpRoute": route or ROUTE, **values}, api_versions=[HTTPROUTE_API])


def api_port_rule(manifest: Manifest) -> dict[str, Any]:
    """The agent NetworkPolicy's rule for callers of the API port alone."""
    policy = manifest.one("NetworkPolicy", FULLNAME)
    rules = [r for r in policy["spec"]["ingress"] if [p["port"] for p in r["ports"]] == [8642]]
    assert len(rules) == 1, policy["spec"]["ingress"]
    return rules[0]


def service_http_port(manifest: Manifest) -> int:
    ports = manifest.one("Service", FULLNAME)["spec"]["ports"]
    return next(p["port"] for p in ports if p["name"] == "http")


def check_httproute_shape(route: dict[str, Any]) -> None:
    """Gateway API v1 HTTPRoute: the fields, types, patterns and limits of its CRD schema."""
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    spec = route["spec"]
    assert set(spec) <= {"parentRefs", "hostnames", "rules"}, spec
    assert 1 <= len(spec["parentRefs"]) <= 32
    for ref in spec["parentRefs"]:
        assert set(ref) <= {"group", "kind", "namespace", "name", "sectionName", "port"}, ref
        assert 1 <= len(ref["name"]) <= 253
        assert "sectionName" not in ref or SECTION_NAME.match(ref["sectionName"]), ref
    assert len(spec.get("hostnames", [])) <= 16
    for host in spec.get("hostnames", []):
        assert GATEWAY_HOSTNAME.match(host) and len(host) <= 253, host
    assert 1 <= len(spec["rules"]) <= 16
    for rule in spec["rules"]:
        assert set(rule) <= {"matches", "backendRefs", "timeouts", "filters"}, rule
        for match in rule["matches"]:
            path = match["path"]
            assert path["type"] in ("Exact", "PathPrefix", "RegularExpression"), path
            assert path["value"].startswith("/") and len(path["value"]) <= 1024, path
        for backend in rule["backendRefs"]:
            assert set(backend) <= {"group", "kind", "name", "namespace", "port", "weight"}
            assert isinstance(backend["port"], int) and 1 <= backend["port"] <= 65535, backend
        for value in rule.get("timeouts", {}).values():
            assert GATEWAY_DURATION.match(value), value


def test_no_entrance_by_default() -> None:
    manifest = render()
    assert not manifest.has("Ingress") and not manifest.has("HTTPRoute")


@pytest.mark.parametrize("kube", [OLDEST_KUBE, NEWEST_KUBE])
def test_ingress_is_valid_kubernetes_and_reaches_the_api_port(kube: str) -> None:
    manifest = render({"ingress": INGRESS}, kube_version=kube)
    ingress = manifest.one("Ingress", FULLNAME)
    try:
        validate(ingress, ".".join(kube.split(".")[:2]), strict=True)
    except ValidationError as error:
        pytest.fail(f"Ingress on {kube}: {error.message}")
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == [{"secretName": "hermes-tls", "hosts": [HOST]}]
    assert [r["host"] for r in spec["rules"]] == [HOST, "agents.example.com"]
    for rule in spec["rules"]:
        (path,) = rule["http"]["paths"]
        assert path["path"] == "/" and path["pathType"] == "Prefix"
        assert path["backend"] == {"service": {"name": FULLNAME, "port": {"name": "http"}}}
    assert any(p["name"] == "http" for p in manifest.one("Service", FULLNAME)["spec"]["ports"])
    assert ingress["metadata"]["annotations"]["cert-manager.io/cluster-issuer"] == "letsencrypt"
    assert ingress["metadata"]["labels"]["team"] == "platform"


def test_ingress_without_class_or_tls_leaves_them_to_the_cluster() -> None:
    values = {**INGRESS, "className": "", "tls": [], "path": "/v1", "pathType": "Exact"}
    spec = render({"ingress": values}).one("Ingress")["spec"]
    assert "ingressClassName" not in spec and "tls" not in spec
    assert spec["rules"][0]["http"]["paths"][0]["path"] == "/v1"
    assert spec["rules"][0]["http"]["paths"][0]["pathType"] == "Exact"


def test_common_annotations_reach_the_ingress() -> None:
    manifest = render({"ingress": INGRESS, "commonAnnotations": {"owner": "team-a"}})
    annotations = manifest.one("Ingress")["metadata"]["annotations"]
    assert annotations["owner"] == "team-a" and "cert-manager.io/cluster-issuer" in annotations


def test_httproute_has_the_gateway_api_shape_and_reaches_the_api_port() -> None:
    manifest = route_render()
    route = manifest.one("HTTPRoute", FULLNAME)
    check_httproute_shape(route)
    spec = route["spec"]
    assert spec["parentRefs"] == [GATEWAY]
    assert spec["hostnames"] == [HOST]
    (rule,) = spec["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert rule["backendRefs"] == [{"name": FULLNAME, "port": service_http_port(manifest)}]
    assert rule["timeouts"] == {"request": "600s"}
    assert route["metadata"]["annotations"] == {"team": "platform"}


def test_httproute_follows_the_api_port_and_leaves_out_what_is_unset() -> None:
    route = {**ROUTE, "hostnames": [], "timeouts": {}}
    manifest = route_render(route, apiServer={"port": 8080})
    spec = manifest.one("HTTPRoute")["spec"]
    check_httproute_shape(manifest.one("HTTPRoute"))
    assert "hostnames" not in spec and "timeouts" not in spec["rules"][0]
    assert spec["rules"][0]["backendRefs"][0]["port"] == 8080 == service_http_port(manifest)


def test_httproute_without_the_gateway_api_is_refused() -> None:
    line = next(
        ln
        for ln in render_error({"httpRoute": ROUTE}).splitlines()
        if ln.startswith("- httpRoute.enabled")
    )
    assert "gateway.networking.k8s.io/v1" in line and "--api-versions" in line, line
    assert "httpRoute.enabled=false" in line, line


def test_network_policy_admits_the_entrance_to_the_api_port_only() -> None:
    manifest = render({"ingress": INGRESS, "httpRoute": ROUTE}, api_versions=[HTTPROUTE_API])
    peers = api_port_rule(manifest)["from"]
    assert NGINX in peers and ENVOY in peers, peers
    policy = manifest.one("NetworkPolicy", FULLNAME)
    for rule in policy["spec"]["ingress"]:
        if [p["port"] for p in rule["ports"]] != [8642]:
            assert NGINX not in rule["from"] and ENVOY not in rule["from"], rule
    try:
        validate(policy, ".".join(NEWEST_KUBE.split(".")[:2]), strict=True)
    except ValidationError as error:
        pytest.fail(f"NetworkPolicy: {error.message}")


def test_entrance_peers_are_not_admitted_while_the_entrance_is_off() -> None:
    values = {"ingress": {"controllerFrom": [NGINX]}, "httpRoute": {"gatewayFrom": [ENVOY]}}
    peers = api_port_rule(render(values))["from"]
    assert NGINX not in peers and ENVOY not in peers, peers


@pytest.mark.parametrize(
    "values",
    [
        {
            "ingress": {**INGRESS, "controllerFrom": []},
            "networkPolicy": {"ingress": {"api": "any"}},
        },
        {"ingress": {**INGRESS, "controllerFrom": []}, "networkPolicy": {"enabled": False}},
    ],
    ids=["api open to any", "no NetworkPolicy"],
)
def test_no_controller_peers_needed_when_nothing_filters(values: dict[str, Any]) -> None:
    assert render(values).one("Ingress")


def entrance_error(values: dict[str, Any], field: str) -> str:
    error = render_error(values, api_versions=[HTTPROUTE_API])
    assert "values that cannot work" in error, error
    line = next((ln for ln in error.splitlines() if ln.startswith(f"- {field}")), None)
    assert line, f"no error line starts with {field!r}:\n{error}"
    assert "pattern" not in line, line
    return line


REFUSED: dict[str, tuple[dict[str, Any], str, str]] = {
    "ingress without a host": (
        {"ingress": {**INGRESS, "hosts": [], "tls": []}},
        "ingress.hosts",
        "hermes.example.com",
    ),
    "ingress host with a scheme": (
        {"ingress": {**INGRESS, "hosts": ["https://hermes.example.com"], "tls": []}},
        "ingress.hosts[0]",
        "no scheme",
    ),
    "ingress host in capitals": (
        {"ingress": {**INGRESS, "hosts": ["Hermes.Example.com"], "tls": []}},
        "ingress.hosts[0]",
        "lower case",
    ),
    "TLS for a host the Ingress does not serve": (
        {"ingress": {**INGRESS, "tls": [{"secretName": "t", "hosts": ["other.example.com"]}]}},
        "ingress.tls[0].hosts[0]",
        "add it to ingress.hosts",
    ),
    "TLS without a Secret": (
        {"ingress": {**INGRESS, "tls": [{"hosts": [HOST]}]}},
        "ingress.tls[0].secretName",
        "kubernetes.io/tls",
    ),
    "ingress path without a slash": ({"ingress": {**INGRESS, "path": "v1"}}, "ingress.path", "/"),
    "ingress controller not admitted": (
        {"ingress": {**INGRESS, "controllerFrom": []}},
        "ingress.controllerFrom",
        "networkPolicy.ingress.api: any",
    ),
    "route without a Gateway": (
        {"httpRoute": {**ROUTE, "parentRefs": []}},
        "httpRoute.parentRefs",
        "name: public",
    ),
    "route hostname with a port": (
        {"httpRoute": {**ROUTE, "hostnames": ["hermes.example.com:443"]}},
        "httpRoute.hostnames[0]",
        "no scheme, port or path",
    ),
    "route timeout with a fraction": (
        {"httpRoute": {**ROUTE, "timeouts": {"request": "1.5m"}}},
        "httpRoute.timeouts.request",
        "600s",
    ),
    "route path without a slash": ({"httpRoute": {**ROUTE, "path": "v1"}}, "httpRoute.path", "/"),
    "Gateway proxies not admitted": (
        {"httpRoute": {**ROUTE, "gatewayFrom": []}},
        "httpRoute.gatewayFrom",
        "networkPolicy.ingress.api: any",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_entrance_that_cannot_work_is_refused_naming_the_field(case: str) -> None:
    values, field, fix = REFUSED[case]
    line = entrance_error(values, field)
    assert fix in line, line


@pytest.mark.parametrize(
    ("values", "path"),
    [
        ({"ingress": {**INGRESS, "pathType": "prefix"}}, "/ingress/pathType"),
        ({"ingress": {**INGRESS, "host": HOST}}, "/ingress"),
        ({"httpRoute": {**ROUTE, "pathType": "Prefix"}}, "/httpRoute/pathType"),
        ({"httpRoute": {**ROUTE, "parentRefs": [{"namespace": "gw"}]}}, "/httpRoute/parentRefs/0"),
        ({"httpRoute": {**ROUTE, "timeouts": {"idle": "5m"}}}, "/httpRoute/timeouts"),
    ],
    ids=["Ingress pathType", "Ingress typo", "Gateway API pathType", "parentRef name", "timeout"],
)
def test_schema_refuses_entrance_values_of_the_wrong_form(
    values: dict[str, Any], path: str
) -> None:
    error = render_error(values, api_versions=[HTTPROUTE_API])
    assert "values don't meet the specifications of the schema" in error, error
    assert path in error, error

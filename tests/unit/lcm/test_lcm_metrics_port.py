"""LCM's metrics port in the gateway answers GET /metrics and nothing else.

Every path of every port a pod serves is reachable by whatever the NetworkPolicy lets in;
prometheus_client's own server answered any path with the metrics (GET /pre-stop: 200),
which made the port look like it had admin paths. Now: 404 for other paths, 501 for other
methods."""

from __future__ import annotations

import http.client

import pytest
from support.net import free_port
from support.wait import wait_until

from hermes_runtime.lcm.host.plugin_host import METRICS_PORT_ENV, metrics_port, serve_metrics


def _request(port: int, method: str, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path, body=b"{}" if method != "GET" else None)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def _listening(port: int) -> bool:
    try:
        _request(port, "GET", "/metrics")
    except OSError:
        return False
    return True


def test_only_get_metrics_is_served() -> None:
    port = free_port()
    serve_metrics(port)
    wait_until(lambda: _listening(port), 10, "the LCM metrics port")
    status, body = _request(port, "GET", "/metrics")
    assert status == 200 and b"# HELP" in body
    for path in ("/", "/pre-stop", "/stop", "/metrics/x"):
        assert _request(port, "GET", path)[0] == 404, path
    for method in ("POST", "PUT", "DELETE"):
        assert _request(port, method, "/metrics")[0] == 501, method


def test_the_port_comes_from_its_variable_and_a_bad_one_is_logged_not_fatal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert metrics_port({METRICS_PORT_ENV: " 9464 "}) == 9464
    assert metrics_port({METRICS_PORT_ENV: ""}) is None
    assert metrics_port({}) is None
    for bad in ("ninety", "0", "70000"):
        assert metrics_port({METRICS_PORT_ENV: bad}) is None
        logged = capsys.readouterr().err
        assert "lcm.metrics.unavailable" in logged and METRICS_PORT_ENV in logged, logged

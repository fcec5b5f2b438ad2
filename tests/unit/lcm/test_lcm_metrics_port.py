"""LCM's metrics port in the gateway answers GET /metrics and nothing else.

Every path of every port a pod serves is reachable by whatever the NetworkPolicy lets in;
prometheus_client's own server answered any path with the metrics (GET /pre-stop: 200),
which made the port look like it had admin paths. Now: 404 for other paths, 501 for other
methods."""

from __future__ import annotations

import http.client
import threading

from support.net import free_port
from support.wait import wait_until

from hermes_runtime.common.boundedhttp import ServerLimits
from hermes_runtime.lcm.host.plugin_host import serve_metrics


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
    serve_metrics(port, ServerLimits())
    wait_until(lambda: _listening(port), 10, "the LCM metrics port")
    status, body = _request(port, "GET", "/metrics")
    assert status == 200 and b"# HELP" in body
    for path in ("/", "/pre-stop", "/stop", "/metrics/x"):
        assert _request(port, "GET", path)[0] == 404, path
    for method in ("POST", "PUT", "DELETE"):
        assert _request(port, method, "/metrics")[0] == 501, method


def test_no_port_serves_nothing() -> None:
    def servers() -> int:
        return sum(t.name == "lcm-metrics" for t in threading.enumerate())

    before = servers()
    serve_metrics(None, ServerLimits())  # the variable unset: no server, no thread
    assert servers() == before

"""Service discovery for Debian's Prometheus, which is built without kubernetes_sd_configs.

What prometheus-operator's config does for a ServiceMonitor, done in a sidecar: every 2 s,
for each job of /etc/prometheus/discovery.json ({"jobs": [{"file", "selector", "port",
"jobLabel"}]}), list the namespace's Services matching the selector, read their
EndpointSlices, and write one file_sd target per endpoint address (ready or not, as the
operator's endpoint discovery keeps not-ready pods) with the labels the operator sets:
job (from the Service label named by jobLabel, else the Service name), namespace, service,
pod, endpoint. Files are replaced atomically; Prometheus watches them. Standard library only.
"""

import json
import os
import ssl
import sys
import time
import urllib.parse
import urllib.request

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
API = "https://kubernetes.default.svc"


def get(path, query):
    with open(f"{ACCOUNT}/token") as handle:
        token = handle.read().strip()
    context = ssl.create_default_context(cafile=f"{ACCOUNT}/ca.crt")
    url = f"{API}{path}?{urllib.parse.urlencode(query)}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10, context=context) as answer:
        return json.load(answer)


def targets(namespace, job):
    selector = ",".join(f"{k}={v}" for k, v in job["selector"].items())
    found = []
    services = get(f"/api/v1/namespaces/{namespace}/services", {"labelSelector": selector})
    for service in services["items"]:
        name = service["metadata"]["name"]
        labels = service["metadata"].get("labels", {})
        slices = get(
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
            {"labelSelector": f"kubernetes.io/service-name={name}"},
        )
        for piece in slices["items"]:
            ports = [p["port"] for p in piece.get("ports") or [] if p.get("name") == job["port"]]
            for endpoint in piece.get("endpoints") or []:
                pod = (endpoint.get("targetRef") or {}).get("name", "")
                for address in endpoint.get("addresses", []):
                    for port in ports:
                        found.append(
                            {
                                "targets": [f"{address}:{port}"],
                                "labels": {
                                    "job": labels.get(job.get("jobLabel", ""), name),
                                    "namespace": namespace,
                                    "service": name,
                                    "pod": pod,
                                    "endpoint": job["port"],
                                },
                            }
                        )
    return found


def write(path, content):
    partial = f"{path}.tmp"
    with open(partial, "w") as handle:
        json.dump(content, handle)
    os.replace(partial, path)


def main():
    with open(f"{ACCOUNT}/namespace") as handle:
        namespace = handle.read().strip()
    with open("/etc/prometheus/discovery.json") as handle:
        spec = json.load(handle)
    while True:
        for job in spec["jobs"]:
            try:
                write(job["file"], targets(namespace, job))
            except (OSError, ValueError, KeyError) as exc:
                print(f"discovery of {job['file']} failed: {exc}", file=sys.stderr, flush=True)
        time.sleep(2)


main()

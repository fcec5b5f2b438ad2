"""Local cluster figures: warm start, stop, memory, and (with --cold) the cold build.

Usage: .venv/bin/python bench/cluster_start.py [--runs 2] [--cold]

Warm start = `ci/cluster-down.sh` then `ci/cluster-up.sh` with the binaries,
PKI and image tarballs already built (it re-imports every image tarball into a
fresh containerd). Memory = resident set size of each cluster process with the
add-ons running. --cold builds every Kubernetes binary and add-on from the Go
module proxy into a fresh scratch cache (no module or build cache; about
30 minutes on 2 shared cores) without touching .cache/k8s. Needs root.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN_DIR = Path("/run/hermes-k8s")
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "containerd",
)


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.monotonic()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def memory_report() -> None:
    total = 0.0
    for name in COMPONENTS:
        pid = int((RUN_DIR / f"{name}.pid").read_text())
        mb = rss_mb(pid)
        total += mb
        print(f"memory rss {name}: {mb:.0f} MB")
    print(f"memory rss cluster processes total: {total:.0f} MB")


def cold_build() -> None:
    with tempfile.TemporaryDirectory(prefix="k8s-cold-") as scratch:
        env = {**os.environ, "K8S_CACHE": scratch}
        seconds = timed([str(REPO / "ci/k8s/build-kubernetes.sh")], env)
        print(f"cold build kubernetes (download + compile, -p 1): {seconds:.0f} s")
        seconds = timed([str(REPO / "ci/k8s/build-addons.sh")], env)
        print(f"cold build add-ons (CoreDNS, local-path-provisioner): {seconds:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()
    if args.cold:
        cold_build()
    subprocess.run([str(REPO / "ci/cluster-up.sh")], check=True, stdout=subprocess.DEVNULL)
    ups, downs = [], []
    for _ in range(args.runs):
        downs.append(timed([str(REPO / "ci/cluster-down.sh")]))
        ups.append(timed([str(REPO / "ci/cluster-up.sh")]))
    runs = args.runs
    print(f"warm start, median (max) of {runs}: {statistics.median(ups):.0f} s ({max(ups):.0f})")
    print(f"stop, median (max) of {runs}: {statistics.median(downs):.0f} s ({max(downs):.0f})")
    memory_report()


if __name__ == "__main__":
    main()

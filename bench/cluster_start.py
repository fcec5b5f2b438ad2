"""Test-cluster figures: kind create to Ready (warm), delete, memory, and the node image build.

Usage: .venv/bin/python bench/cluster_start.py [--runs 3] [--node-image-cold]

Warm create = `ci/cluster-down.sh` then `ci/cluster-up.sh` with the node image already built
(kind create with the podman provider, registry start, hosts.toml, all nodes Ready).
Memory = the node container's cgroup usage with the add-ons running (podman stats).
--node-image-cold rebuilds the node image from cached binaries and image tarballs
(`FORCE=1 ci/kind/build-node-image.sh`: base image, assembly, commit); the binaries' own
cold build is timed by `.ci/run` on an empty cache (docs/benchmarks.md). Needs root.
Prints one line per figure, with the 1-minute load average beside it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

import runinfo

REPO = Path(__file__).resolve().parents[1]
NODE = "hermes-control-plane"


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.monotonic()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def node_memory() -> str:
    out = subprocess.run(
        ["podman", "stats", "--no-stream", "--format", "{{.MemUsage}}", NODE],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--node-image-cold", action="store_true")
    args = parser.parse_args()
    runinfo.announce()
    if args.node_image_cold:
        seconds = timed(
            [str(REPO / "ci/kind/build-node-image.sh")], env={**os.environ, "FORCE": "1"}
        )
        print(f"node image build (cached binaries), FORCE=1: {seconds:.1f} s ({load()})")
    creates, deletes = [], []
    for _ in range(args.runs):
        deletes.append(timed([str(REPO / "ci/cluster-down.sh")]))
        creates.append(timed([str(REPO / "ci/cluster-up.sh")]))
        print(f"cluster create to Ready, warm: {creates[-1]:.1f} s ({load()})")
    print(
        f"cluster create to Ready, warm: median {statistics.median(creates):.1f} s, "
        f"max {max(creates):.1f} s over {len(creates)} runs"
    )
    print(f"cluster delete: median {statistics.median(deletes):.1f} s")
    time.sleep(20)  # let the add-ons settle before reading memory
    print(f"memory of the node container with the add-ons running: {node_memory()} ({load()})")


if __name__ == "__main__":
    main()

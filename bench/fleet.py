"""Benchmark: a fleet of ten agents on the multi-node cluster, with each agent pod's idle cost.

Usage:
    .venv/bin/python bench/fleet.py [--kubeconfig .cache/kind-multi/kubeconfig]

Runs the multi-node tier's fleet scenario (tests/e2e_multinode/test_fleet.py: ten releases in
three namespaces across two workers, isolation probes, a `helm upgrade` of all ten) with
``HERMES_FLEET_COST=1``, which adds what `make test` leaves out: a minute idle after one
conversation, then each agent pod's memory (its containers' cgroups) and its CPU over a 40 s
idle window. The scenario's own lines are printed as they come: install and upgrade times,
the cost table, the isolation summary. Needs `make cluster-multi` and the images of `make
e2e-multinode`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import runinfo

SCENARIO = "tests/e2e_multinode/test_fleet.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = runinfo.REPO / ".cache" / "kind-multi" / "kubeconfig"
    parser.add_argument("--kubeconfig", default=str(default), help=f"default {default}")
    args = parser.parse_args()
    if not os.path.isfile(args.kubeconfig):
        parser.error(f"--kubeconfig {args.kubeconfig}: no such file (run `make cluster-multi`)")
    runinfo.announce()
    env = {**os.environ, "HERMES_FLEET_COST": "1", "KUBECONFIG": args.kubeconfig}
    pytest = [sys.executable, "-m", "pytest", "-n", "0", "-s", "-q", "-p", "no:cacheprovider"]
    return subprocess.run([*pytest, SCENARIO], cwd=runinfo.REPO, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())

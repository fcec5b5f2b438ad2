#!/usr/bin/env bash
# `make cluster`: the test cluster. kind v0.33.0 (podman provider) with a node image built on
# this machine and the local registry every image is pulled from (ci/kind/up.sh,
# docs/cluster.md). Writes the kubeconfig to .cache/kind/kubeconfig.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/ci/kind/up.sh"
echo "export KUBECONFIG=$ROOT/.cache/kind/kubeconfig"

#!/usr/bin/env bash
# What the e2e tier needs before its first test: the cluster (ci/cluster-up.sh: kind and the
# local registry, unless KUBECONFIG names your cluster) and every image it installs, built and
# pushed to REGISTRY (ci/build-images.sh). `make e2e` (and so `make test`) runs it first.
#
# Usage: ci/e2e-prepare.sh IMAGE...   (the images of ci/build-images.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
start=$(date +%s)
if [[ -z "${KUBECONFIG:-}" ]]; then
  "$ROOT/ci/cluster-up.sh"
fi
REGISTRY="${REGISTRY:-localhost:5001}" "$ROOT/ci/build-images.sh" "$@"
echo "e2e-prepare: cluster and images ready in $(($(date +%s) - start)) s" >&2

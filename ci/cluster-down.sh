#!/usr/bin/env bash
# `make cluster-down`: remove everything cluster-up.sh started (same provider switch).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
case "${HERMES_CLUSTER_PROVIDER:-local}" in
  local) "$ROOT/ci/k8s/local-down.sh" ;;
  kind) kind delete cluster --name hermes ;;
  *) echo "cluster-down: HERMES_CLUSTER_PROVIDER must be local or kind" >&2; exit 2 ;;
esac

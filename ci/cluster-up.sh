#!/usr/bin/env bash
# `make cluster`: bring up a single-node Kubernetes cluster, load the project's
# images and write a kubeconfig to .cache/k8s/kubeconfig. Two providers behind
# one interface, chosen by HERMES_CLUSTER_PROVIDER=local|kind.
#   local: registry-free; everything built from the Go module proxy + Debian (ci/k8s/).
#   kind:  needs kind + Docker with registry access (UNTESTED on the build machines).
# The default is `local` unless HERMES_CLUSTER_PROVIDER=kind, because kind
# silently needs a registry for its node image.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PROVIDER="${HERMES_CLUSTER_PROVIDER:-local}"
KUBECONFIG_PATH="$ROOT/.cache/k8s/kubeconfig"
case "$PROVIDER" in
  local)
    "$ROOT/ci/k8s/local-up.sh"
    ;;
  kind)
    command -v kind >/dev/null || { echo "cluster-up: kind not found on PATH" >&2; exit 1; }
    mkdir -p "$(dirname "$KUBECONFIG_PATH")"
    if ! kind get clusters 2>/dev/null | grep -qx hermes; then
      kind create cluster --config "$ROOT/ci/kind-config.yaml" --kubeconfig "$KUBECONFIG_PATH" --wait 180s
    else
      kind export kubeconfig --name hermes --kubeconfig "$KUBECONFIG_PATH"
    fi
    "$ROOT/ci/k8s/build-addons.sh" busybox-only   # the e2e probes' image
    "$ROOT/ci/k8s/load-images.sh" kind
    ;;
  *)
    echo "cluster-up: HERMES_CLUSTER_PROVIDER must be local or kind, got '$PROVIDER'" >&2; exit 2 ;;
esac
echo "export KUBECONFIG=$KUBECONFIG_PATH"

#!/usr/bin/env bash
# Delete the kind cluster and stop the local registry. What is cached stays: the node image in
# podman's store, the registry's storage in .cache/registry, binaries and image tarballs in
# .cache/k8s and .cache/kind, so the next ci/kind/up.sh is warm.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/ci/kind/versions.sh"
export KIND_EXPERIMENTAL_PROVIDER=podman PATH="$ROOT/.cache/kind/bin:$PATH"
if command -v kind >/dev/null && command -v podman >/dev/null; then
  kind delete cluster --name "$CLUSTER_NAME" >&2 || true
fi
command -v podman >/dev/null && "$ROOT/ci/kind/registry.sh" down
exit 0

#!/usr/bin/env bash
# Delete the multi-node cluster `hermes-multi` (ci/kind/multi-up.sh). The single-node cluster,
# the registry (and its connection to the multi-node network), the network itself and every
# cache stay, so the next multi-up.sh only runs `kind create cluster`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
export KIND_EXPERIMENTAL_PROVIDER=podman PATH="$ROOT/.cache/kind/bin:$PATH"
if command -v kind >/dev/null && command -v podman >/dev/null; then
  kind delete cluster --name "${MULTI_NAME:-hermes-multi}" >&2 || true
fi
rm -f "$ROOT/.cache/kind-multi/kubeconfig"
exit 0

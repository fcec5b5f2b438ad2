#!/usr/bin/env bash
# Bring up the test cluster with kind: the local registry, the node image built here, then
# `kind create cluster` (podman provider) with ci/kind-config.yaml, and the registry wired into
# every node's containerd (kind's local-registry recipe: certs.d/localhost:5001/hosts.toml).
# A cluster that already runs the same node image is kept (warm start: seconds).
# Writes the kubeconfig to .cache/kind/kubeconfig.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/ci/kind"
source "$HERE/versions.sh"
KIND_BIN="$ROOT/.cache/kind/bin"
KUBECONFIG_PATH="$ROOT/.cache/kind/kubeconfig"
export KIND_EXPERIMENTAL_PROVIDER=podman PATH="$KIND_BIN:$ROOT/.cache/tools/bin:$PATH"
log() { echo "kind-up: $*" >&2; }

running_image() { # the node image of the running cluster (empty: none runs or answers)
  [[ "$(podman inspect -f '{{.State.Running}}' "$CLUSTER_NAME-control-plane" 2>/dev/null)" == true ]] &&
    [[ -f "$KUBECONFIG_PATH" ]] &&
    KUBECONFIG="$KUBECONFIG_PATH" kubectl get --raw /readyz --request-timeout=5s >/dev/null 2>&1 &&
    podman inspect -f '{{.ImageName}}' "$CLUSTER_NAME-control-plane"
  return 0
}

wire_registry() { # every node pulls localhost:5001/... from the registry container
  local address node dir="/etc/containerd/certs.d/localhost:$REGISTRY_HOST_PORT"
  address="$("$HERE/registry.sh" address)"
  for node in $(kind get nodes --name "$CLUSTER_NAME"); do
    podman exec "$node" mkdir -p "$dir"
    printf '[host."http://%s:5000"]\n  capabilities = ["pull", "resolve"]\n' "$address" |
      podman exec -i "$node" sh -c "cat > '$dir/hosts.toml.tmp' && mv '$dir/hosts.toml.tmp' '$dir/hosts.toml'"
  done
}

main() {
  local image start
  start=$(date +%s)
  "$HERE/install-podman.sh"
  "$HERE/registry.sh" up
  image="$("$HERE/build-node-image.sh")" # builds kind too
  mkdir -p "$(dirname "$KUBECONFIG_PATH")"
  if [[ "$(running_image)" == "$image" ]]; then
    kind export kubeconfig --name "$CLUSTER_NAME" --kubeconfig "$KUBECONFIG_PATH" >/dev/null 2>&1
  else
    # A stopped node (its processes were ended) or an older image: start from scratch, as kind
    # does not promise that a node survives its container being killed.
    kind delete cluster --name "$CLUSTER_NAME" >/dev/null 2>&1 || true
    log "creating cluster $CLUSTER_NAME from $image"
    kind create cluster --name "$CLUSTER_NAME" --config "$ROOT/ci/kind-config.yaml" --image "$image" \
      --kubeconfig "$KUBECONFIG_PATH" --wait 180s
  fi
  wire_registry
  KUBECONFIG="$KUBECONFIG_PATH" kubectl wait --for=condition=Ready nodes --all --timeout=180s >/dev/null
  log "cluster $CLUSTER_NAME Ready in $(($(date +%s) - start)) s"
}

main "$@"

#!/usr/bin/env bash
# Bring up the multi-node test cluster `hermes-multi` (docs/cluster.md, "Multi-node cluster"):
# one control plane and NODES-1 workers (NODES=3 by default, at least 3), from the same node
# image and the same local registry as the single-node cluster, which it never touches.
#  - its own podman network with DNS (MULTI_NETWORK): on a network without it the workers cannot
#    resolve the control plane at `kubeadm join`; the registry container is connected to it too,
#    and the host forwards traffic between its nodes (allow_node_traffic);
#  - ci/kind-config.yaml's settings for this VM, with the node list written here, every node
#    mounting the host directory .cache/kind-multi/shared at /mnt/shared-path (kind extraMounts);
#  - the node-local default class `local-path` (from the node image) and `shared-path`
#    (ci/kind/shared-path-storage.yaml: local-path-provisioner over the shared directory).
# A cluster that runs the same node image with the same node count is kept (warm start).
# Writes the kubeconfig to .cache/kind-multi/kubeconfig.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/ci/kind"
source "$HERE/versions.sh"
NODES="${NODES:-3}"
MULTI_NAME="${MULTI_NAME:-hermes-multi}"
MULTI_NETWORK="${MULTI_NETWORK:-hermes-multi}"
STATE="$ROOT/.cache/kind-multi"
KUBECONFIG_PATH="$STATE/kubeconfig"
export KIND_EXPERIMENTAL_PROVIDER=podman KIND_EXPERIMENTAL_PODMAN_NETWORK="$MULTI_NETWORK"
export PATH="$ROOT/.cache/kind/bin:$ROOT/.cache/tools/bin:$PATH"
log() { echo "kind-multi-up: $*" >&2; }
kc() { KUBECONFIG="$KUBECONFIG_PATH" kubectl "$@"; }

check_nodes() {
  if ! [[ "$NODES" =~ ^[0-9]+$ ]] || ((NODES < 3)); then
    log "NODES=$NODES: a control plane plus at least two workers (NODES >= 3) is needed"
    exit 2
  fi
}

ensure_network() { # a network with DNS; an old one without it is replaced while unused
  local dns
  if dns="$(podman network inspect -f '{{.DNSEnabled}}' "$MULTI_NETWORK" 2>/dev/null)"; then
    [[ "$dns" == true ]] && return 0
    log "network $MULTI_NETWORK has no DNS (created before the dnsname plugin): recreating it"
    podman network rm "$MULTI_NETWORK" >/dev/null || {
      log "network $MULTI_NETWORK is in use; delete the cluster first (ci/kind/multi-down.sh)"
      exit 1
    }
  fi
  podman network create -d bridge "$MULTI_NETWORK" >/dev/null
  dns="$(podman network inspect -f '{{.DNSEnabled}}' "$MULTI_NETWORK")"
  [[ "$dns" == true ]] || {
    log "podman created $MULTI_NETWORK without DNS: is golang-github-containernetworking-plugin-dnsname installed (ci/kind/install-podman.sh)?"
    exit 1
  }
}

allow_node_traffic() { # pod traffic between nodes crosses the host's bridge: let it through
  # With br_netfilter, frames between two node containers pass the host's FORWARD chain, whose
  # policy is DROP once Docker runs; podman's CNI firewall rules accept only the nodes' own
  # addresses, so pod-to-pod and pod-to-API-server traffic between nodes (pod addresses) was
  # dropped. Docker accepts traffic within each of its bridges the same way. CNI-ADMIN is the
  # CNI firewall plugin's chain for such rules; only this network's bridge is named.
  local bridge
  bridge="$(podman network inspect -f '{{.NetworkInterface}}' "$MULTI_NETWORK")"
  iptables -n -L CNI-ADMIN >/dev/null 2>&1 || iptables -N CNI-ADMIN
  iptables -C CNI-ADMIN -i "$bridge" -o "$bridge" -j ACCEPT 2>/dev/null ||
    iptables -I CNI-ADMIN -i "$bridge" -o "$bridge" -j ACCEPT
}

connect_registry() { # the registry container joins the network (kind's local-registry recipe)
  local joined
  joined="$(podman inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$REGISTRY_NAME")"
  [[ " $joined " == *" $MULTI_NETWORK "* ]] || podman network connect "$MULTI_NETWORK" "$REGISTRY_NAME"
}

registry_address() {
  podman inspect -f "{{(index .NetworkSettings.Networks \"$MULTI_NETWORK\").IPAddress}}" "$REGISTRY_NAME"
}

write_config() { # OUT SHARED_DIR: ci/kind-config.yaml with this cluster's node list
  local out="$1" shared="$2" i mount
  mount=$'    extraMounts:\n      - hostPath: '"$shared"$'\n        containerPath: /mnt/shared-path'
  {
    sed '/^nodes:/,$d' "$ROOT/ci/kind-config.yaml"
    echo "nodes:"
    echo "  - role: control-plane"
    echo "$mount"
    for ((i = 1; i < NODES; i++)); do
      echo "  - role: worker"
      echo "$mount"
    done
  } >"$out"
}

running_image() { # the node image of a running cluster with NODES nodes (empty: none)
  [[ "$(podman inspect -f '{{.State.Running}}' "$MULTI_NAME-control-plane" 2>/dev/null)" == true ]] &&
    [[ -f "$KUBECONFIG_PATH" ]] &&
    [[ "$(kind get nodes --name "$MULTI_NAME" 2>/dev/null | wc -l)" == "$NODES" ]] &&
    kc get --raw /readyz --request-timeout=5s >/dev/null 2>&1 &&
    podman inspect -f '{{.ImageName}}' "$MULTI_NAME-control-plane"
  return 0
}

wire_registry() { # every node pulls localhost:5001/... from the registry container
  local address node dir="/etc/containerd/certs.d/localhost:$REGISTRY_HOST_PORT"
  address="$(registry_address)"
  for node in $(kind get nodes --name "$MULTI_NAME"); do
    podman exec "$node" mkdir -p "$dir"
    printf '[host."http://%s:5000"]\n  capabilities = ["pull", "resolve"]\n' "$address" |
      podman exec -i "$node" sh -c "cat > '$dir/hosts.toml.tmp' && mv '$dir/hosts.toml.tmp' '$dir/hosts.toml'"
  done
}

create() { # IMAGE
  local image="$1" shared="$STATE/shared"
  kind delete cluster --name "$MULTI_NAME" >/dev/null 2>&1 || true
  # A new cluster starts with an empty shared filesystem: old volumes' PVs died with the old one.
  rm -rf "$shared" && mkdir -p "$shared"
  write_config "$STATE/kind-config.yaml" "$(realpath "$shared")"
  log "creating cluster $MULTI_NAME ($NODES nodes) from $image"
  kind create cluster --name "$MULTI_NAME" --config "$STATE/kind-config.yaml" --image "$image" \
    --kubeconfig "$KUBECONFIG_PATH" --wait 180s
}

main() {
  local image start
  start=$(date +%s)
  check_nodes
  "$HERE/install-podman.sh"
  "$HERE/registry.sh" up
  image="$("$HERE/build-node-image.sh")" # builds kind too
  mkdir -p "$STATE"
  ensure_network
  connect_registry
  allow_node_traffic
  if [[ "$(running_image)" == "$image" ]]; then
    kind export kubeconfig --name "$MULTI_NAME" --kubeconfig "$KUBECONFIG_PATH" >/dev/null 2>&1
  else
    create "$image"
  fi
  wire_registry
  kc apply -f "$HERE/shared-path-storage.yaml" >/dev/null
  # Both provisioners on the control plane, as shared-path's manifest does: draining a worker
  # never stops provisioning.
  kc -n local-path-storage patch deployment local-path-provisioner --type merge -p \
    '{"spec":{"template":{"spec":{"nodeSelector":{"node-role.kubernetes.io/control-plane":""},"tolerations":[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"}]}}}}' >/dev/null
  kc wait --for=condition=Ready nodes --all --timeout=180s >/dev/null
  kc -n kube-system rollout status daemonset/kube-router --timeout=180s >/dev/null
  kc -n shared-path-storage rollout status deployment/shared-path-provisioner --timeout=180s >/dev/null
  kc -n local-path-storage rollout status deployment/local-path-provisioner --timeout=180s >/dev/null
  log "cluster $MULTI_NAME ($NODES nodes) Ready in $(($(date +%s) - start)) s"
}

main "$@"

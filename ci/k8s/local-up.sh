#!/usr/bin/env bash
# Brings up a single-node Kubernetes cluster from locally built binaries:
# etcd (Debian), kube-apiserver/controller-manager/scheduler/kubelet/kube-proxy
# (built from the Go module proxy), a private containerd + runc + CNI bridge,
# CoreDNS and local-path-provisioner. All images are imported, never pulled.
# Idempotent: components already running are left alone.
set -euo pipefail
source "$(dirname "$0")/env.sh"
HERE="$(cd "$(dirname "$0")" && pwd)"
NODE_NAME="${K8S_NODE_NAME:-hermes-node}"
NODE_IP="${K8S_NODE_IP:-$(ip -4 route get 1.1.1.1 | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1)}')}"
POD_CIDR="10.244.0.0/16"
SERVICE_CIDR="10.96.0.0/16"
ETCD_URL="http://127.0.0.1:23790"
T0=$(date +%s)
log() { echo "cluster-up: [$(( $(date +%s) - T0 ))s] $*" >&2; }
die() { echo "cluster-up: ERROR: $*" >&2; exit 1; }

[[ $EUID -eq 0 ]] || die "the local cluster needs root (containerd, iptables, mounts)"
[[ -n "$NODE_IP" ]] || die "could not find this host's IPv4 address (set K8S_NODE_IP)"

"$HERE/install-deps.sh"
"$HERE/build-kubernetes.sh"
"$HERE/build-addons.sh"
"$HERE/pki.sh" "$NODE_IP" "$NODE_NAME"
mkdir -p "$K8S_STATE"/{config,cni/net.d,cni/ipam,storage,kubelet} "$K8S_RUN" "$K8S_LOGS"

render() {  # render TEMPLATE OUTPUT
  sed -e "s|@STATE@|$K8S_STATE|g" -e "s|@RUN@|$K8S_RUN|g" -e "s|@PKI@|$K8S_PKI|g" \
      -e "s|@NODE_NAME@|$NODE_NAME|g" -e "s|@STORAGE_DIR@|$K8S_STATE/storage|g" "$1" > "$2.tmp"
  mv "$2.tmp" "$2"
}
render "$HERE/config/containerd.toml" "$K8S_STATE/config/containerd.toml"
render "$HERE/config/10-hermes-bridge.conflist" "$K8S_STATE/cni/net.d/10-hermes-bridge.conflist"
render "$HERE/config/kubelet.yaml" "$K8S_STATE/config/kubelet.yaml"
render "$HERE/config/kube-proxy.yaml" "$K8S_STATE/config/kube-proxy.yaml"
render "$HERE/manifests/coredns.yaml" "$K8S_STATE/config/coredns.yaml"
render "$HERE/manifests/local-path.yaml" "$K8S_STATE/config/local-path.yaml"

# --- kernel + host network (rules are tagged so cluster-down removes exactly these) ---
modprobe br_netfilter 2>/dev/null || true
modprobe overlay 2>/dev/null || true
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 || die "sysctl failed (br_netfilter missing?)"
rule() {  # rule TABLE CHAIN ARGS... : insert once
  local table="$1" chain="$2"; shift 2
  iptables -t "$table" -C "$chain" "$@" -m comment --comment hermes-k8s 2>/dev/null ||
    iptables -t "$table" -I "$chain" 1 "$@" -m comment --comment hermes-k8s
}
rule filter FORWARD -s "$POD_CIDR" -j ACCEPT
rule filter FORWARD -d "$POD_CIDR" -j ACCEPT
rule nat POSTROUTING -s "$POD_CIDR" ! -d "$POD_CIDR" -j MASQUERADE

# --- processes ---
running() { [[ -f "$K8S_RUN/$1.pid" ]] && kill -0 "$(cat "$K8S_RUN/$1.pid")" 2>/dev/null; }
start() {  # start NAME CMD... : one background process per component, log + pid file
  local name="$1"; shift
  if running "$name"; then log "$name already running (pid $(cat "$K8S_RUN/$name.pid"))"; return 0; fi
  log "starting $name"
  setsid "$@" >>"$K8S_LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$K8S_RUN/$name.pid"
}
wait_for() {  # wait_for WHAT SECONDS CMD...
  local what="$1" timeout="$2"; shift 2
  local deadline=$(( $(date +%s) + timeout ))
  until "$@" >/dev/null 2>&1; do
    if (( $(date +%s) > deadline )); then
      log "timed out waiting for $what; last log lines:"
      tail -n 30 "$K8S_LOGS/${what%% *}.log" >&2 2>/dev/null || true
      die "$what not ready after ${timeout}s (logs in $K8S_LOGS)"
    fi
    sleep 0.5
  done
  log "$what ready"
}
CTR=(ctr --address "$CONTAINERD_SOCK" -n k8s.io)
KUBECTL=(kubectl --kubeconfig "$KUBECONFIG_PATH")

start containerd containerd --config "$K8S_STATE/config/containerd.toml"
wait_for containerd 60 "${CTR[@]}" version

"$HERE/load-images.sh" local

start etcd etcd --name hermes-k8s --data-dir "$K8S_STATE/etcd" \
  --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
  --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
  --initial-cluster hermes-k8s=http://127.0.0.1:23800 --listen-metrics-urls http://127.0.0.1:23810
wait_for etcd 60 curl -sf "$ETCD_URL/health"

P="$K8S_PKI"
start kube-apiserver kube-apiserver --etcd-servers="$ETCD_URL" \
  --bind-address=0.0.0.0 --secure-port=6443 --advertise-address="$NODE_IP" \
  --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
  --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="$P/ca.crt" --kubelet-preferred-address-types=InternalIP,Hostname \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
  --service-cluster-ip-range="$SERVICE_CIDR" --authorization-mode=Node,RBAC \
  --enable-admission-plugins=NodeRestriction --allow-privileged=true --profiling=false
wait_for kube-apiserver 120 curl -sf --cacert "$P/ca.crt" --cert "$P/admin.crt" --key "$P/admin.key" "https://127.0.0.1:6443/readyz"

start kube-controller-manager kube-controller-manager --kubeconfig="$P/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$P/controller-manager.kubeconfig" --authorization-kubeconfig="$P/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" \
  --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
  --allocate-node-cidrs=true --cluster-cidr="$POD_CIDR" --node-cidr-mask-size=24 --service-cluster-ip-range="$SERVICE_CIDR"
start kube-scheduler kube-scheduler --kubeconfig="$P/scheduler.kubeconfig" \
  --authentication-kubeconfig="$P/scheduler.kubeconfig" --authorization-kubeconfig="$P/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false
start kubelet kubelet --config="$K8S_STATE/config/kubelet.yaml" --kubeconfig="$P/kubelet.kubeconfig" \
  --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --root-dir="$K8S_STATE/kubelet"
start kube-proxy kube-proxy --config="$K8S_STATE/config/kube-proxy.yaml"

node_ready() { "${KUBECTL[@]}" get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True; }
wait_for "kubelet (node $NODE_NAME Ready)" 180 node_ready

log "applying add-ons (CoreDNS, local-path-provisioner)"
"${KUBECTL[@]}" apply -f "$K8S_STATE/config/coredns.yaml" -f "$K8S_STATE/config/local-path.yaml" >/dev/null
"${KUBECTL[@]}" -n kube-system rollout status deploy/coredns --timeout=180s >&2 || die "CoreDNS did not become ready (see kubectl -n kube-system describe pod)"
"${KUBECTL[@]}" -n local-path-storage rollout status deploy/local-path-provisioner --timeout=180s >&2 || die "local-path-provisioner did not become ready"
log "cluster ready in $(( $(date +%s) - T0 ))s"

#!/usr/bin/env bash
# Stops everything local-up.sh started and removes its runtime state: pods'
# containers, the processes it recorded, mounts, the CNI bridge, kube-proxy's
# and our own iptables rules. Keeps the caches (binaries, images, PKI) so the
# next start is warm. Safe to run when nothing is up.
set -uo pipefail
source "$(dirname "$0")/env.sh"
log() { echo "cluster-down: $*" >&2; }
CTR=(ctr --address "$CONTAINERD_SOCK" -n k8s.io)

stop_pids() {  # stop_pids NAME... : TERM together, KILL after 10 s; only the pids we recorded
  local name pid pids=()
  for name in "$@"; do
    [[ -f "$K8S_RUN/$name.pid" ]] || continue
    pid="$(cat "$K8S_RUN/$name.pid")"
    rm -f "$K8S_RUN/$name.pid"
    kill -0 "$pid" 2>/dev/null || continue
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  done
  for _ in $(seq 1 40); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || return 0
    sleep 0.25
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null && log "killed pid $pid after 10 s"; done
  return 0
}

# The kubelet first, so it does not restart the containers we remove.
stop_pids kubelet kube-proxy
if [[ -S "$CONTAINERD_SOCK" ]] && "${CTR[@]}" version >/dev/null 2>&1; then
  for task in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks kill -s SIGKILL "$task" >/dev/null 2>&1; done
  sleep 1
  for task in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks delete -f "$task" >/dev/null 2>&1; done
  for c in $("${CTR[@]}" containers ls -q 2>/dev/null); do "${CTR[@]}" containers delete "$c" >/dev/null 2>&1; done
fi
stop_pids kube-scheduler kube-controller-manager kube-apiserver etcd containerd

# Shims are children of nobody once containerd is gone; ours name our socket.
for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" || true); do
  log "killing leftover shim pid $pid"; kill -KILL "$pid" 2>/dev/null
done

# kube-proxy knows how to remove its own chains.
if [[ -x "$K8S_BIN/kube-proxy" ]]; then "$K8S_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
for table in filter nat; do
  iptables -t "$table" -S 2>/dev/null | grep -- '--comment hermes-k8s' | sed 's/^-A /-D /' |
    while read -r rule; do eval "iptables -t $table $rule"; done
done
# KUBE-* chains the kubelet creates (KUBE-FIREWALL, canaries, hints) in both
# families: unhook them from the built-in chains, then flush and delete them.
for cmd in iptables ip6tables; do
  for table in filter nat mangle; do
    "$cmd" -t "$table" -S 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | grep -vE '^-A KUBE-' | sed 's/^-A /-D /' |
      while read -r rule; do eval "$cmd -t $table $rule"; done
    for chain in $("$cmd" -t "$table" -S 2>/dev/null | awk '/^-N KUBE-/ {print $2}'); do
      "$cmd" -t "$table" -F "$chain" 2>/dev/null
    done
    for chain in $("$cmd" -t "$table" -S 2>/dev/null | awk '/^-N KUBE-/ {print $2}'); do
      "$cmd" -t "$table" -X "$chain" 2>/dev/null
    done
  done
done

# Unmount everything below our state and run dirs, deepest first.
for dir in "$K8S_STATE" "$K8S_RUN"; do
  awk -v d="$dir" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || log "could not unmount $m"; done
done
ip link show hermes0 >/dev/null 2>&1 && { log "removing bridge hermes0"; ip link delete hermes0; }
# containerd's CNI result cache (fixed at /var/lib/cni) for the pods killed above.
for f in /var/lib/cni/results/hermes-k8s-*-eth0; do
  [[ -e "$f" ]] || continue
  id="${f#/var/lib/cni/results/hermes-k8s-}"; id="${id%-eth0}"
  rm -f "$f" "/var/lib/cni/results/cni-loopback-$id-lo"
done
rm -rf "$K8S_STATE" "$K8S_RUN"
log "done"

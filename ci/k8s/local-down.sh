#!/usr/bin/env bash
# Stops everything local-up.sh started and removes its runtime state: pods'
# containers, the processes it recorded, mounts, the CNI bridge, kube-proxy's
# and our own iptables rules. Keeps the caches (binaries, images, PKI) so the
# next start is warm. Safe to run when nothing is up.
set -uo pipefail
source "$(dirname "$0")/env.sh"
log() { echo "cluster-down: $*" >&2; }
CTR=(ctr --address "$CONTAINERD_SOCK" -n k8s.io)

stop_pid() {  # stop_pid NAME : TERM, then KILL, only the pid we recorded
  local name="$1" pidfile="$K8S_RUN/$1.pid" pid
  [[ -f "$pidfile" ]] || return 0
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

# The kubelet first, so it does not restart the containers we remove.
stop_pid kubelet
stop_pid kube-proxy
if [[ -S "$CONTAINERD_SOCK" ]] && "${CTR[@]}" version >/dev/null 2>&1; then
  for task in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks kill -s SIGKILL "$task" >/dev/null 2>&1; done
  sleep 1
  for task in $("${CTR[@]}" tasks ls -q 2>/dev/null); do "${CTR[@]}" tasks delete -f "$task" >/dev/null 2>&1; done
  for c in $("${CTR[@]}" containers ls -q 2>/dev/null); do "${CTR[@]}" containers delete "$c" >/dev/null 2>&1; done
fi
for name in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop_pid "$name"; done

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
# Chains the kubelet creates for its own bookkeeping.
for table in filter nat mangle; do
  for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-PROXY-CANARY; do
    iptables -t "$table" -F "$chain" 2>/dev/null && iptables -t "$table" -X "$chain" 2>/dev/null
  done
done

# Unmount everything below our state and run dirs, deepest first.
for dir in "$K8S_STATE" "$K8S_RUN"; do
  awk -v d="$dir" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r |
    while read -r m; do umount -l "$m" 2>/dev/null || log "could not unmount $m"; done
done
ip link show hermes0 >/dev/null 2>&1 && { log "removing bridge hermes0"; ip link delete hermes0; }
rm -rf "$K8S_STATE" "$K8S_RUN"
log "done"

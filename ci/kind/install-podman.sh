#!/usr/bin/env bash
# Podman for kind's podman provider, configured for this VM (facts in docs/cluster.md):
#  - runc, not crun: crun refuses the VM's hybrid cgroups;
#  - default_ulimits = []: podman's default nofile ulimit needs CAP_SYS_RESOURCE, which the
#    VM's capability bounding set lacks (Docker 20.10's --privileged asks for it too, which is
#    why kind's docker provider cannot start a node here);
#  - an empty /lib/modules: kind mounts it into the node, and this kernel has no module tree;
#  - CNI's dnsname plugin: without it podman creates networks with `dns_enabled: false`, and the
#    workers of a multi-node cluster cannot resolve the control plane at `kubeadm join` (a network
#    keeps the setting it was created with: ci/kind/multi-up.sh uses one of its own).
# Also the base image local/debian:bookworm in podman's store (debootstrapped, no registry).
# Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PACKAGES=(podman runc containernetworking-plugins golang-github-containernetworking-plugin-dnsname iptables catatonit busybox-static debootstrap jq ca-certificates)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "install-podman: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
conf=/etc/containers/containers.conf
want=$'[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"'
if [[ "$(cat "$conf" 2>/dev/null)" != "$want" ]]; then
  mkdir -p /etc/containers
  printf '%s\n' "$want" >"$conf.tmp" && mv "$conf.tmp" "$conf"
fi
mkdir -p /lib/modules
ENGINE=podman "$ROOT/ci/build-base-image.sh"

#!/usr/bin/env bash
# Debian packages the local Kubernetes path needs; idempotent and quiet when present.
set -euo pipefail
PACKAGES=(containerd runc containernetworking-plugins etcd-server iptables conntrack socat
          catatonit busybox-static openssl iproute2 util-linux ethtool kmod ca-certificates)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "k8s install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v go >/dev/null || [[ -x /usr/local/go/bin/go ]] || {
  echo "k8s install-deps: Go (>= 1.24) is required to build Kubernetes; /usr/local/go/bin/go not found" >&2; exit 1; }

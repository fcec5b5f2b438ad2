#!/usr/bin/env bash
# Debian packages the test tiers and the demo need; `make test`, `make integration` and
# `make demo` run this first. Idempotent and quiet when everything is there.
#   git           the plugin tests' real repositories, the git-sync stand-in's tests
#   redis-server  the Vault dynamic-secret test's real backend
#   python3.11    the venv (checked, not installed: bookworm ships 3.11 as python3.11)
# Docker, containerd and the Kubernetes packages are installed by the scripts that use them
# (ci/install-docker.sh, ci/k8s/install-deps.sh).
set -euo pipefail
PACKAGES=(git make redis-server prometheus python3.11 python3.11-venv ca-certificates)

sudo_if_needed() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# A python3.11 built outside Debian (pyenv, /usr/local) is fine: do not ask apt for it.
if command -v python3.11 >/dev/null && python3.11 -c 'import venv, ensurepip' 2>/dev/null; then
  kept=()
  for pkg in "${missing[@]}"; do
    [[ "$pkg" == python3.11 || "$pkg" == python3.11-venv ]] || kept+=("$pkg")
  done
  missing=("${kept[@]}")
fi
if ((${#missing[@]})); then
  echo "install-system-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  sudo_if_needed apt-get -o DPkg::Lock::Timeout=600 update -qq
  sudo_if_needed apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v python3.11 >/dev/null || { echo "install-system-deps: python3.11 is required" >&2; exit 1; }

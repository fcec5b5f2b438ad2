#!/usr/bin/env bash
# Debian packages the tests need; idempotent and quiet when everything is there.
set -euo pipefail
PACKAGES=(git make redis-server prometheus)
missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "install-system-deps: installing ${missing[*]}" >&2
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
command -v python3.11 >/dev/null || { echo "install-system-deps: python3.11 is required" >&2; exit 1; }

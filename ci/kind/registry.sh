#!/usr/bin/env bash
# The local registry every cluster pulls from: `registry.sh up` starts Debian's docker-registry
# in a podman container on kind's network (so nodes reach it as hermes-registry:5000, the way
# kind's local-registry guide sets it up), published on 127.0.0.1:5001 for pushes, with its
# storage in .cache/registry so pushed images survive restarts. `registry.sh down` stops it.
# `registry.sh address` prints the address nodes use. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/ci/kind"
source "$HERE/versions.sh"
STORE="$ROOT/.cache/registry"
IMAGE="localhost/hermes-runtime/registry:2.8"
log() { echo "registry: $*" >&2; }

ensure_network() {
  podman network exists kind || podman network create -d bridge kind >/dev/null
}

ensure_image() {
  podman image exists "$IMAGE" && return 0
  local ctx
  ctx=$(mktemp -d)
  cp "$HERE/registry-config.yml" "$ctx/config.yml"
  podman build -q --network host -t "$IMAGE" -f "$HERE/registry.Dockerfile" "$ctx" >/dev/null
  rm -rf "$ctx"
}

up() {
  ensure_network
  ensure_image
  mkdir -p "$STORE"
  chown -R 0:0 "$STORE"
  # A container left "running" by a killed session may answer nothing: probe, not trust.
  if ! curl -fsS -m 2 "http://127.0.0.1:$REGISTRY_HOST_PORT/v2/" >/dev/null 2>&1; then
    podman rm -f "$REGISTRY_NAME" >/dev/null 2>&1 || true
    podman run -d --name "$REGISTRY_NAME" --network kind --user 0 \
      -p "127.0.0.1:$REGISTRY_HOST_PORT:5000" -v "$STORE:/var/lib/docker-registry" "$IMAGE" >/dev/null
  fi
  local i
  for i in $(seq 1 50); do
    curl -fsS "http://127.0.0.1:$REGISTRY_HOST_PORT/v2/" >/dev/null 2>&1 && { log "up on 127.0.0.1:$REGISTRY_HOST_PORT"; return 0; }
    sleep 0.2
  done
  log "no answer on http://127.0.0.1:$REGISTRY_HOST_PORT/v2/ after 10 s"; podman logs --tail 20 "$REGISTRY_NAME" >&2; exit 1
}

down() { podman rm -f "$REGISTRY_NAME" >/dev/null 2>&1 || true; }

address() { # the registry's address on kind's network
  podman inspect -f '{{(index .NetworkSettings.Networks "kind").IPAddress}}' "$REGISTRY_NAME"
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  address) address ;;
  *) echo "usage: registry.sh up|down|address" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Loads image tarballs (docker save format) into the cluster's container
# runtime: the cluster's own images (.cache/k8s/images) and the project's
# (.cache/images, from ci/build-images.sh). Only tarballs changed since their
# last import are imported again. Usage: load-images.sh [local|kind]
set -euo pipefail
source "$(dirname "$0")/env.sh"
PROVIDER="${1:-${HERMES_CLUSTER_PROVIDER:-local}}"
STAMPS="$K8S_STATE/imported"
[[ "$PROVIDER" == kind ]] && STAMPS="$K8S_CACHE/kind-imported"
mkdir -p "$STAMPS"
for tar in "$K8S_IMAGES"/*.tar "$K8S_REPO_ROOT"/.cache/images/*.tar; do
  [[ -f "$tar" ]] || continue
  stamp="$STAMPS/$(echo "$tar" | md5sum | cut -c1-16)"
  [[ -f "$stamp" && "$stamp" -nt "$tar" ]] && continue
  echo "load-images: importing $(basename "$tar")" >&2
  case "$PROVIDER" in
    local) ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$tar" >/dev/null ;;
    kind) kind load image-archive --name hermes "$tar" ;;
    *) echo "load-images: provider must be local or kind" >&2; exit 2 ;;
  esac || { echo "load-images: import of $tar failed" >&2; exit 1; }
  touch "$stamp"
done

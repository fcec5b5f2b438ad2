#!/usr/bin/env bash
# Builds the cluster add-ons from Go modules (CoreDNS, local-path-provisioner, and
# kube-state-metrics for the e2e tier's live alerts: its image is made by ci/build-images.sh)
# into .cache/k8s/bin, and the busybox helper image of local-path-provisioner into
# .cache/k8s/images/busybox.tar; ci/kind/build-node-image.sh makes the other images.
# Everything is skipped when already built. Each version is pinned by its module's go.mod.
#
# Usage: ci/k8s/build-addons.sh           every add-on
#        ci/k8s/build-addons.sh NAME...   only these binaries (ci/build-images.sh asks for
#                                         kube-state-metrics alone when building its image)
set -euo pipefail
source "$(dirname "$0")/env.sh"
HERE="$(cd "$(dirname "$0")" && pwd)"
PARALLEL="${K8S_BUILD_PARALLEL:-1}"
mkdir -p "$K8S_BIN" "$K8S_IMAGES"

build() {  # build OUTPUT MODULE_DIR PACKAGE
  local out="$1" dir="$2" pkg="$3"
  [[ -x "$K8S_BIN/$out" ]] && return 0
  echo "build-addons: building $out" >&2
  local start=$(date +%s)
  (cd "$HERE/$dir" && go build -p "$PARALLEL" -trimpath -ldflags "-s -w" -o "$K8S_BIN/$out.tmp" "$pkg")
  mv "$K8S_BIN/$out.tmp" "$K8S_BIN/$out"
  echo "build-addons: $out done in $(( $(date +%s) - start )) s" >&2
}
image() {  # image NAME TAG ARGS...
  local name="$1" tag="$2"; shift 2
  local out="$K8S_IMAGES/$name.tar"
  [[ -f "$out" && "$out" -nt "$HERE/mkimage.py" && "$out" -nt "$0" ]] && return 0
  python3 "$HERE/mkimage.py" --tag "$tag" --out "$out" "$@"
}
if (($#)); then
  for name in "$@"; do
    case "$name" in
      kube-state-metrics) build kube-state-metrics kube-state-metrics k8s.io/kube-state-metrics/v2 ;;
      *) echo "build-addons: unknown add-on '$name' (known: kube-state-metrics)" >&2; exit 2 ;;
    esac
  done
  exit 0
fi
applets=()
for a in sh mkdir rm rmdir chmod chown ls cat echo sleep test true false env id wget nslookup httpd nc hostname; do applets+=(--symlink "/bin/$a:busybox"); done
image busybox docker.io/hermes-runtime/busybox:dev --file /bin/busybox:/bin/busybox "${applets[@]}" \
  --entrypoint '["/bin/sh"]' --dir /tmp:1777

build coredns coredns .
build local-path-provisioner local-path github.com/rancher/local-path-provisioner
build kube-state-metrics kube-state-metrics k8s.io/kube-state-metrics/v2

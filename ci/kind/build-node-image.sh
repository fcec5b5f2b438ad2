#!/usr/bin/env bash
# Build the kind node image for Kubernetes v1.34.4 on a machine with no container registry,
# the way `kind build node-image` does it: start the base image, copy the Kubernetes binaries
# in, import every image the node needs into its containerd, write the default CNI and storage
# manifests and /kind/version, commit. `kind build node-image` itself cannot run here: for every
# image it did not build (etcd, CoreDNS, pause, the CNI, the storage provisioner) it runs
# `ctr content fetch` inside the build container against registry.k8s.io and docker.io, with no
# mirror option (pkg/build/nodeimage/buildcontext.go), and neither is reachable.
#
# Everything is built from source the Go module proxy serves, plus Debian packages:
#   kubelet, kubeadm, kubectl, kube-apiserver, -controller-manager, -scheduler, kube-proxy  (ci/k8s/kubernetes)
#   etcd 3.6.5 (ci/k8s/etcd), CoreDNS 1.14.7 (ci/k8s/coredns), local-path-provisioner 0.0.30
#   crictl 1.34.0, kube-router 2.1.0 (the CNI and NetworkPolicy enforcer: manifests/default-cni.yaml)
#   and, not in the node image, kube-state-metrics 2.20.0 for the e2e's alerts (ci/k8s/build-addons.sh)
# Images are named as kubeadm and kind's config expect (registry.k8s.io/...), so nothing is pulled.
#
# Usage: ci/kind/build-node-image.sh            prints the node image name on stdout
#        ci/kind/build-node-image.sh binaries   only compiles (kind and every Go binary above):
#                                               no podman, no apt, so `make test` runs it in the
#                                               background beside the image builds
# Env:   FORCE=1 rebuilds the node image even when its inputs did not change.
# Cached: binaries in .cache/k8s/bin and .cache/kind/bin, image tarballs in .cache/kind/images,
# the node image in podman's store, tagged with a hash of its inputs.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/ci/kind"
source "$ROOT/ci/k8s/env.sh"
source "$HERE/versions.sh"
KIND_CACHE="$ROOT/.cache/kind"
KIND_BIN="$KIND_CACHE/bin"
IMAGES="$KIND_CACHE/images"
PARALLEL="${K8S_BUILD_PARALLEL:-1}"
mkdir -p "$KIND_BIN" "$IMAGES"

log() { echo "build-node-image: $*" >&2; }
step() { # NAME COMMAND...: run a step, report its time (structured when not on a tty)
  local name="$1" start
  shift
  start=$(date +%s)
  log "$name ..."
  "$@"
  log "$name done in $(($(date +%s) - start)) s"
}

go_install() { # BINARY MODULE@VERSION PACKAGE
  local bin="$1" mod="$2" pkg="$3"
  [[ -x "$KIND_BIN/$bin" ]] && return 0
  GOFLAGS=-buildvcs=false GOBIN="$KIND_BIN" go install -p "$PARALLEL" -trimpath -ldflags "-s -w" "$pkg@${mod#*@}"
}

install_kind() { # go_install, and again when the cached kind is another version
  "$KIND_BIN/kind" version 2>/dev/null | grep -q "kind $KIND_VERSION " || rm -f "$KIND_BIN/kind"
  go_install kind "sigs.k8s.io/kind@$KIND_VERSION" sigs.k8s.io/kind
}

build_binaries() {
  command -v go >/dev/null || {
    log "Go (>= 1.26) is required to build kind and Kubernetes; /usr/local/go/bin/go not found"
    return 1
  }
  install_kind
  "$ROOT/ci/k8s/build-kubernetes.sh"
  "$ROOT/ci/k8s/build-addons.sh"
  go_install crictl "sigs.k8s.io/cri-tools@$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl
  go_install kube-router "github.com/cloudnativelabs/kube-router/v2@$KUBE_ROUTER_VERSION" \
    github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
  if [[ ! -x "$KIND_BIN/etcd" || ! -x "$KIND_BIN/etcdctl" ]]; then
    (cd "$ROOT/ci/k8s/etcd" &&
      go build -p "$PARALLEL" -trimpath -ldflags "-s -w" -o "$KIND_BIN/etcd" go.etcd.io/etcd/server/v3 &&
      go build -p "$PARALLEL" -trimpath -ldflags "-s -w" -o "$KIND_BIN/etcdctl" go.etcd.io/etcd/etcdctl/v3)
  fi
}

# An image tarball is rebuilt only when its inputs changed, judged by content (a fresh clone
# has new mtimes but the same inputs): OUT.inputs holds the sha256 of what made OUT.
inputs_sum() { # TEXT FILE...: sha256 of a description and the files' contents
  { [[ -z "$1" ]] || echo "$1"; shift; cat "$@"; } | sha256sum | cut -c1-64
}
up_to_date() { [[ -f "$1" && "$(cat "$1.inputs" 2>/dev/null)" == "$2" ]]; }

mkimage() { # OUT MKIMAGE-ARGS...: a single-layer image written by ci/k8s/mkimage.py
  local out="$1" sum arg files=()
  shift
  for arg in "$@"; do [[ "$arg" == /*:/* && -f "${arg%%:*}" ]] && files+=("${arg%%:*}"); done
  sum=$(inputs_sum "$*" "$ROOT/ci/k8s/mkimage.py" "${files[@]}")
  up_to_date "$out" "$sum" && return 0
  python3 "$ROOT/ci/k8s/mkimage.py" --out "$out" "$@"
  echo "$sum" >"$out.inputs"
}

scratch_image() { # NAME TAG BINARY... : FROM-scratch image with static binaries in /usr/local/bin
  local name="$1" tag="$2" args=() bin
  shift 2
  for bin in "$@"; do args+=(--file "$bin:/usr/local/bin/$(basename "$bin")"); done
  mkimage "$IMAGES/$name.tar" --tag "$tag" "${args[@]}" \
    --entrypoint "[\"/usr/local/bin/$(basename "$1")\"]" --dir /tmp:1777 --dir /var/lib:0755 \
    --env PATH=/usr/local/bin:/usr/bin:/bin
}

debian_image() { # NAME TAG BINARY : Debian + iptables/ipset/conntrack + the binary (kube-proxy, kube-router)
  local name="$1" tag="$2" bin="$3" out="$IMAGES/$1.tar" ctx sum
  sum=$(inputs_sum "" "$bin" "$HERE/netutils.Dockerfile" "$HERE/iptables-wrapper.sh")
  up_to_date "$out" "$sum" && return 0
  ctx=$(mktemp -d)
  cp "$bin" "$HERE/iptables-wrapper.sh" "$ctx/" && cp -r "$ROOT/ci/images/build-ca" "$ctx/"
  podman build -q --network host --build-arg "BINARY=$(basename "$bin")" -t "$tag" \
    -f "$HERE/netutils.Dockerfile" "$ctx" >/dev/null
  rm -rf "$ctx"
  podman save --format docker-archive -o "$out.tmp" "$tag" >/dev/null
  mv "$out.tmp" "$out"
  echo "$sum" >"$out.inputs"
}

build_images() {
  local k="registry.k8s.io"
  scratch_image kube-apiserver "$k/kube-apiserver:$K8S_VERSION" "$K8S_BIN/kube-apiserver"
  scratch_image kube-controller-manager "$k/kube-controller-manager:$K8S_VERSION" "$K8S_BIN/kube-controller-manager"
  scratch_image kube-scheduler "$k/kube-scheduler:$K8S_VERSION" "$K8S_BIN/kube-scheduler"
  scratch_image etcd "$k/etcd:$ETCD_IMAGE_TAG" "$KIND_BIN/etcd" "$KIND_BIN/etcdctl"
  # Upstream's image runs as 65532 with a file capability (cap_net_bind_service) on /coredns;
  # this one runs as root instead, and kubeadm's Deployment drops every capability but that one.
  mkimage "$IMAGES/coredns.tar" --tag "$k/coredns/coredns:$COREDNS_VERSION" \
    --file "$K8S_BIN/coredns:/coredns" --entrypoint '["/coredns"]' --user 0
  mkimage "$IMAGES/pause.tar" --tag "$k/pause:$PAUSE_VERSION" \
    --file /usr/bin/catatonit:/pause --entrypoint '["/pause","-P"]' --user 65535
  mkimage "$IMAGES/local-path-provisioner.tar" \
    --tag "docker.io/hermes-runtime/local-path-provisioner:$LOCAL_PATH_VERSION" \
    --file "$K8S_BIN/local-path-provisioner:/usr/bin/local-path-provisioner" \
    --entrypoint '["/usr/bin/local-path-provisioner"]' --dir /tmp:1777
  cmp -s "$K8S_IMAGES/busybox.tar" "$IMAGES/busybox.tar" || cp -f "$K8S_IMAGES/busybox.tar" "$IMAGES/busybox.tar"
  debian_image kube-proxy "$k/kube-proxy:$K8S_VERSION" "$K8S_BIN/kube-proxy"
  debian_image kube-router "docker.io/hermes-runtime/kube-router:$KUBE_ROUTER_VERSION" "$KIND_BIN/kube-router"
}

build_base() {
  local ctx files tag="hermes-runtime/kind-base:$KIND_VERSION"
  files="$(go env GOMODCACHE)/sigs.k8s.io/kind@$KIND_VERSION/images/base/files"
  [[ -d "$files" ]] || GOFLAGS=-mod=mod go mod download "sigs.k8s.io/kind@$KIND_VERSION"
  if [[ "${FORCE:-0}" != 1 ]] && podman image exists "$tag"; then return 0; fi
  ctx=$(mktemp -d)
  cp -r "$files" "$ctx/kind-files" && chmod -R u+w "$ctx/kind-files"
  cp "$KIND_BIN/crictl" "$ctx/" && cp -r "$ROOT/ci/images/build-ca" "$ctx/"
  podman build -q --network host -t "$tag" -f "$HERE/node-base.Dockerfile" "$ctx" >/dev/null
  rm -rf "$ctx"
}

inputs_hash() { # everything the node image is made of
  (
    podman image inspect -f '{{.Id}}' "hermes-runtime/kind-base:$KIND_VERSION"
    cat "$HERE/manifests/"*.yaml "$0" "$HERE/versions.sh"
    sha256sum "$K8S_BIN"/{kubelet,kubeadm,kubectl} "$IMAGES"/*.tar | cut -c1-64
  ) | sha256sum | cut -c1-12
}

assemble_node() { # TAG
  local tag="$1" tar
  BUILD_CONTAINER=$(podman run -d --entrypoint=sleep --security-opt seccomp=unconfined \
    "hermes-runtime/kind-base:$KIND_VERSION" infinity)
  local id="$BUILD_CONTAINER"
  for b in kubelet kubeadm kubectl; do podman cp "$K8S_BIN/$b" "$id:/usr/bin/$b"; done
  podman exec "$id" mkdir -p /kind/manifests
  podman cp "$HERE/manifests/default-cni.yaml" "$id:/kind/manifests/default-cni.yaml"
  podman cp "$HERE/manifests/default-storage.yaml" "$id:/kind/manifests/default-storage.yaml"
  podman exec "$id" sh -c "echo $K8S_VERSION > /kind/version"
  podman exec "$id" sh -c 'nohup containerd >/tmp/containerd.log 2>&1 &'
  podman exec "$id" sh -c 'for i in $(seq 1 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done; cat /tmp/containerd.log; exit 1'
  for tar in "$IMAGES"/*.tar; do
    podman exec -i "$id" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
      --all-platforms --no-unpack --digests - <"$tar" >/dev/null
  done
  podman exec "$id" ctr --namespace=k8s.io images list -q | grep -v '^sha256:\|^import-' >&2
  podman exec "$id" pkill containerd || true
  sleep 1
  podman commit -q --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' "$id" "$tag" >/dev/null
  podman rm -f -t 0 -v "$id" >/dev/null
  BUILD_CONTAINER=""
}

BUILD_CONTAINER=""
remove_build_container() { [[ -z "$BUILD_CONTAINER" ]] || podman rm -f -t 0 -v "$BUILD_CONTAINER" >/dev/null 2>&1 || true; }
trap remove_build_container EXIT

main() {
  if [[ "${1:-}" == binaries ]]; then
    step "binaries" build_binaries
    return 0
  fi
  "$HERE/install-podman.sh"
  step "binaries" build_binaries
  step "images" build_images
  step "base image" build_base
  local tag
  tag="$NODE_IMAGE_REPO:$K8S_VERSION-$(inputs_hash)"
  if [[ "${FORCE:-0}" == 1 ]] || ! podman image exists "$tag"; then
    step "node image $tag" assemble_node "$tag"
  fi
  echo "$tag"
}

main "$@"

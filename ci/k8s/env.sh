# Shared settings for building Kubernetes and its add-ons from the Go module proxy (the kind
# node image's contents: ci/kind/build-node-image.sh). Sourced, not run. Everything lives under
# .cache/k8s, and the Go module + build caches there make a rebuild after a source change cheap.
K8S_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
K8S_VERSION="v1.34.4"
K8S_CACHE="${K8S_CACHE:-$K8S_REPO_ROOT/.cache/k8s}"
K8S_BIN="$K8S_CACHE/bin"
K8S_IMAGES="$K8S_CACHE/images"
TOOLS_BIN="$K8S_REPO_ROOT/.cache/tools/bin"
export GOMODCACHE="$K8S_CACHE/go/mod" GOCACHE="$K8S_CACHE/go/cache" GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false"
export CGO_ENABLED=0
export PATH="$K8S_BIN:$TOOLS_BIN:/usr/local/go/bin:/usr/sbin:/sbin:$PATH"

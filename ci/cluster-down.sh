#!/usr/bin/env bash
# `make cluster-down`: delete the kind cluster and stop the local registry (caches stay).
set -euo pipefail
exec "$(cd "$(dirname "$0")/.." && pwd)/ci/kind/down.sh"

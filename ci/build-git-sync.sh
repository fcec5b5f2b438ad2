#!/usr/bin/env bash
# Build git-sync v4 (k8s.io/git-sync) as a static binary into .cache/tools/bin/git-sync.
#
# Usage: ci/build-git-sync.sh [TOOLS_DIR]     (default: <repo>/.cache/tools)
#
# git-sync's module path is k8s.io/git-sync with v4.x tags but no /v4 suffix,
# so Go rejects @v4.x.y; the release commit is addressed by its pseudo-version.
# Pinned: v4.7.1 = commit d9d12f7e9839 (2026-07-06).
#
# Idempotent: an existing binary that reports the pinned version is kept.
# GIT_SYNC_BIN=/path/to/git-sync: use that binary instead of building (it must
# report a v4 version); for machines where the Go module proxy does not serve
# k8s.io/git-sync (seen on 2026-11-29: every version answered 403 "This module
# version is not available").
set -euo pipefail

GIT_SYNC_VERSION="v4.7.1"
GIT_SYNC_PSEUDO="v0.0.0-20260706174027-d9d12f7e9839"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_DIR="${1:-$REPO_ROOT/.cache/tools}"
DEST="$TOOLS_DIR/bin/git-sync"

reported_version() {
    "$1" --version 2>/dev/null | head -n1 | tr -d '[:space:]' || true
}

if [[ -x "$DEST" && "$(reported_version "$DEST")" == "$GIT_SYNC_VERSION" ]]; then
    echo "git-sync $GIT_SYNC_VERSION already at $DEST"
    exit 0
fi
mkdir -p "$TOOLS_DIR/bin"

if [[ -n "${GIT_SYNC_BIN:-}" ]]; then
    version="$(reported_version "$GIT_SYNC_BIN")"
    if [[ "$version" != v4.* ]]; then
        echo "error: GIT_SYNC_BIN=$GIT_SYNC_BIN reports version '$version', expected v4.x" >&2
        exit 1
    fi
    install -m 0755 "$GIT_SYNC_BIN" "$DEST.tmp"
    mv -f "$DEST.tmp" "$DEST"
    echo "git-sync $version installed at $DEST (from GIT_SYNC_BIN)"
    exit 0
fi

command -v go >/dev/null || { echo "error: go is not installed (need Go >= 1.22)" >&2; exit 1; }
GOBIN_TMP="$(mktemp -d)"
trap 'rm -rf "$GOBIN_TMP"' EXIT
echo "building git-sync $GIT_SYNC_VERSION (k8s.io/git-sync@$GIT_SYNC_PSEUDO) ..."
if ! CGO_ENABLED=0 GOBIN="$GOBIN_TMP" GOFLAGS=-mod=mod go install -trimpath \
    -ldflags "-s -w -X k8s.io/git-sync/pkg/version.VERSION=$GIT_SYNC_VERSION" \
    "k8s.io/git-sync@$GIT_SYNC_PSEUDO"; then
    cat >&2 <<MSG
error: could not build k8s.io/git-sync@$GIT_SYNC_PSEUDO from the Go module proxy
       (GOPROXY=$(go env GOPROXY)). If the proxy does not serve this module, provide a
       git-sync v4 binary with GIT_SYNC_BIN=/path/to/git-sync $0
MSG
    exit 1
fi
install -m 0755 "$GOBIN_TMP/git-sync" "$DEST.tmp"
mv -f "$DEST.tmp" "$DEST"
echo "git-sync $(reported_version "$DEST") installed at $DEST"

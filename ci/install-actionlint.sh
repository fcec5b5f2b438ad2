#!/usr/bin/env bash
# actionlint v1.7.12 (github.com/rhysd/actionlint), built from the Go module proxy into
# DEST/bin (default .cache/tools): `make lint` and tests/unit/test_workflows.py check the
# GitHub workflow files with it. No prebuilt release can be downloaded on these machines.
set -euo pipefail
DEST=${1:-$(pwd)/.cache/tools}
VERSION=v1.7.12
mkdir -p "$DEST/bin"
if [[ -x "$DEST/bin/actionlint" ]] && "$DEST/bin/actionlint" -version | head -n1 | grep -qx "$VERSION"; then
  exit 0
fi
echo "install-actionlint: building actionlint $VERSION" >&2
GOFLAGS=-buildvcs=false GOBIN="$DEST/bin" go install -trimpath -ldflags "-s -w" \
  "github.com/rhysd/actionlint/cmd/actionlint@$VERSION"

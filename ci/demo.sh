#!/usr/bin/env bash
# make demo: until the cluster path lands, a runtime demo on a scratch data dir.
set -euo pipefail
echo "demo: not assembled yet" >&2

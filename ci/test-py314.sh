#!/usr/bin/env bash
# The Python 3.14 tier of `make test`: the unit tests on Debian sid's python3.14, in the
# py314-tests image (ci/images/py314-tests.Dockerfile; the host stays on bookworm and its
# Python 3.11). The checkout is mounted at /src and the build cache at its own path (the
# checkout's .cache links there: pinned restic, actionlint). Arguments go to pytest.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_HOME="$(readlink -f "$REPO_ROOT/.cache")"
IMAGE=hermes-runtime/py314-tests:dev
WORKERS="${TEST_WORKERS:-3}"

NO_PUSH=1 "$REPO_ROOT/ci/build-images.sh" py314-tests
version="$(docker run --rm --network none "$IMAGE" python --version)"
echo "test-py314: $version, image $(docker image inspect -f '{{.Id}}' "$IMAGE")" >&2
case "$version" in "Python 3.14."*) ;; *) echo "test-py314: expected Python 3.14" >&2; exit 1 ;; esac
workers=()
[[ "$WORKERS" != 0 ]] && workers=(-n "$WORKERS" --dist worksteal)
# docs/cli.md is argparse's rendering on the project's Python (3.11): 3.14's argparse wraps
# usage lines and shows groups differently, so that one comparison runs in the 3.11 tier only.
# Everything else of the tier runs here.
REFERENCE_ONLY=tests/unit/cli/test_cli_reference.py::test_docs_cli_md_matches_the_parser
echo "test-py314: not here (3.11 tier only): $REFERENCE_ONLY" >&2
# CAP_SYS_ADMIN, no seccomp/AppArmor filter: the full-volume tests mount small tmpfs volumes,
# as root on the host does (--privileged asks for CAP_SYS_RESOURCE, which this VM lacks);
# --network host: a few unit tests serve on loopback; --tmpfs /tmp: pytest's tmp_path stays
# in the container; no pytest cache (the checkout's is 3.11's).
exec docker run --rm --cap-add SYS_ADMIN --security-opt seccomp=unconfined \
  --security-opt apparmor=unconfined --network host --tmpfs /tmp:exec,size=4g --shm-size 256m \
  -v "$REPO_ROOT:/src" -v "$CACHE_HOME:$CACHE_HOME" \
  -e CI="${CI:-}" -e HOME=/root \
  "$IMAGE" python -m pytest tests/unit "${workers[@]}" -p no:cacheprovider \
  --deselect "$REFERENCE_ONLY" "$@"

#!/usr/bin/env bash
# Build every image the project needs with no upstream registry, and push each to the registry
# the clusters pull from (REGISTRY, default the local one `make cluster` starts on
# 127.0.0.1:5001), the way a platform team publishes to theirs.
#
# Usage: ci/build-images.sh [IMAGE...]   IMAGE in: agent git-sync git-server seaweedfs openbao
#                                        fake-llm busybox prometheus package-index
#                                        kube-state-metrics (default: all);
#                                        py314-tests (the Python 3.14 test runner), agent-on-upstream
#                                        (Dockerfile.upstream) and hermes-standin (its stand-in base):
#                                        only by name, never pushed
# Env:   BASE_IMAGE    base for every Debian-based image (default: local/debian:bookworm, built
#                      by ci/build-base-image.sh; where Docker Hub is reachable, e.g. the
#                      Dockerfile's digest-pinned python:3.11-slim-bookworm@sha256:...). Its
#                      image ID (or pinned digest) is logged before the builds.
#        REGISTRY      where to push (default localhost:5001; a path is allowed, e.g.
#                      localhost:5001/mine to keep a branch's images apart); images are tagged
#                      REGISTRY/hermes-runtime/<name>:<tag> (the agent: the chart's appVersion)
#        NO_PUSH=1     build only (the image tests only need the images in Docker)
#        NO_CACHE=1    cold build: ignore Docker's layer cache and re-debootstrap the base
#        HERMES_BASE_IMAGE  upstream's image for agent-on-upstream (default: the stand-in
#                      hermes-standin, built here; docs/hermes-versions.md)
#        HERMES_AGENT_SPEC  the Hermes the agent image installs instead of the locked 0.19.0:
#                      a requirement or a wheel/sdist under ci/images/hermes-dist/
#                      (docs/hermes-versions.md; installed without hashes, with a warning)
#
# kube-state-metrics is upstream's, compiled from the Go module proxy by ci/k8s/build-addons.sh
# (the cluster's add-ons; cached in .cache/k8s/bin, so after `make test`'s background build of
# the cluster binaries this only packs it).
#
# git-sync is the stand-in (ci/images/git-sync/git_sync.py), a test double of upstream git-sync
# v4 for machines where registry.k8s.io/git-sync/git-sync cannot be pulled (docs/plugins.md).
#
# Cached: Docker's layer cache makes a warm run quick, and an image is pushed only when its ID
# changed since its last push. An image that cannot be built is reported, the others are still
# built, and the script exits 1 at the end.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGES_DIR="$REPO_ROOT/ci/images"
STAMPS="$REPO_ROOT/.cache/images/pushed"
LOCK="$REPO_ROOT/.cache/images/build.lock"
REGISTRY="${REGISTRY:-localhost:5001}"
APP_VERSION="$(awk -F'"' '/^appVersion:/ {print $2}' "$REPO_ROOT/charts/hermes-agent/Chart.yaml")"
BASE_IMAGE="${BASE_IMAGE:-local/debian:bookworm}"
ALL=(agent git-sync git-server seaweedfs openbao fake-llm busybox prometheus package-index agent-previous
  kube-state-metrics)
export DOCKER_BUILDKIT=0 # the legacy builder: Debian's docker.io 20.10 has no buildx plugin

log() { echo "build-images: $*" >&2; }

tag_of() {
  case "$1" in
    agent) echo "hermes-runtime/agent:$APP_VERSION" ;;
    git-sync | git-server | seaweedfs | openbao | fake-llm | busybox | prometheus | package-index | agent-previous | \
      kube-state-metrics)
      echo "hermes-runtime/$1:dev" ;;
    py314-tests) echo "hermes-runtime/py314-tests:dev" ;;
    hermes-standin) echo "hermes-runtime/hermes-standin:dev" ;;
    agent-on-upstream) echo "hermes-runtime/agent-on-upstream:$APP_VERSION" ;;
    *) return 1 ;;
  esac
}

copy_build_cas() {
  # The host's extra CAs (a TLS-intercepting egress proxy) for builder stages; gitignored.
  local ca
  for ca in /usr/local/share/ca-certificates/*.crt; do
    [[ -f "$ca" ]] && cp -f "$ca" "$IMAGES_DIR/build-ca/"
  done
  return 0
}

docker_build() { # TAG CONTEXT DOCKERFILE [BUILD-ARG...]
  local cache=()
  [[ "${NO_CACHE:-0}" == 1 ]] && cache=(--no-cache)
  # HERMES_AGENT_SPEC (the agent only): another Hermes to install (docs/hermes-versions.md).
  local args=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
  [[ -n "${HERMES_AGENT_SPEC:-}" ]] && args+=(--build-arg "HERMES_AGENT_SPEC=$HERMES_AGENT_SPEC")
  local extra
  for extra in "${@:4}"; do args+=(--build-arg "$extra"); done
  docker build "${cache[@]}" --network host "${args[@]}" -q \
    -t "$1" -f "$3" "$2" >/dev/null
}

# A small context for an auxiliary image: its Dockerfile plus the files it copies.
aux_context() { # NAME FILE...
  local name="$1" ctx
  shift
  ctx="$WORK/$name"
  mkdir -p "$ctx"
  cp -r "$IMAGES_DIR/build-ca" "$ctx/" || return 1
  if (($#)); then cp -r "$@" "$ctx/" || return 1; fi
  echo "$ctx"
}

# The agent image of an earlier commit (ci/images/agent-previous.commit): the release the
# upgrade-and-rollback scenario starts from (tests/e2e/test_upgrade_rollback.py). Built from
# this repository's own history, so the checkout needs that commit (not a shallow clone).
previous_context() {
  local commit ctx
  commit="$(tr -d '[:space:]' <"$IMAGES_DIR/agent-previous.commit")"
  if ! git -C "$REPO_ROOT" cat-file -e "$commit^{commit}" 2>/dev/null; then
    log "agent-previous: commit $commit (ci/images/agent-previous.commit) is not in this" \
      "checkout: clone with full history (git fetch --unshallow)"
    return 1
  fi
  ctx="$WORK/agent-previous"
  mkdir -p "$ctx"
  git -C "$REPO_ROOT" archive "$commit" | tar -x -C "$ctx" || return 1
  cp -r "$IMAGES_DIR/build-ca/." "$ctx/ci/images/build-ca/" || return 1
  echo "$ctx"
}

# Before an agent image is pushed: every CLI group's verbs build and every capability
# imports (otherwise a tree caught half-edited pushes an image whose CLI group fails to
# import, and every e2e run pulls it).
smoke_test_agent() { # TAG
  local group out
  for group in plugins backup lcm vault secrets agent; do
    out="$(docker run --rm --network none "$1" hermes-runtime "$group" --help 2>&1)" || {
      log "smoke test of $1 failed: hermes-runtime $group --help:"
      echo "$out" | tail -n 20 >&2
      return 1
    }
  done
  out="$(docker run --rm --network none "$1" python3 -c 'import importlib
for name in ("agent", "backup", "clustersecrets", "compat", "lcm", "plugins", "vault"):
    importlib.import_module("hermes_runtime." + name)' 2>&1)" || {
    log "smoke test of $1 failed: importing hermes_runtime's packages:"
    echo "$out" | tail -n 20 >&2
    return 1
  }
}

# Runs inside `if`, where bash ignores `set -e`: every step carries its own `|| return 1`.
build_one() {
  local name="$1" tag ctx
  tag="$(tag_of "$name")"
  case "$name" in
    agent)
      docker_build "$tag" "$REPO_ROOT" "$REPO_ROOT/Dockerfile" || return 1
      smoke_test_agent "$tag" || return 1
      ;;
    git-sync)
      ctx="$(aux_context "$name" "$IMAGES_DIR/git-sync/git_sync.py")" || return 1
      docker_build "$tag" "$ctx" "$IMAGES_DIR/git-sync.Dockerfile" || return 1
      ;;
    git-server)
      ctx="$(aux_context "$name" "$IMAGES_DIR/git-server/serve.py")" || return 1
      docker_build "$tag" "$ctx" "$IMAGES_DIR/git-server.Dockerfile" || return 1
      ;;
    fake-llm)
      ctx="$(aux_context "$name" "$REPO_ROOT/tests/fakes/openai_server.py")" || return 1
      docker_build "$tag" "$ctx" "$IMAGES_DIR/fake-llm.Dockerfile" || return 1
      ;;
    seaweedfs | openbao | package-index)
      ctx="$(aux_context "$name" "$IMAGES_DIR/$name-requirements.txt")" || return 1
      docker_build "$tag" "$ctx" "$IMAGES_DIR/$name.Dockerfile" || return 1
      ;;
    prometheus)
      ctx="$(aux_context "$name")" || return 1
      docker_build "$tag" "$ctx" "$IMAGES_DIR/prometheus.Dockerfile" || return 1
      ;;
    agent-previous)
      ctx="$(previous_context)" || return 1
      docker_build "$tag" "$ctx" "$ctx/Dockerfile" || return 1
      ;;
    py314-tests) # never pushed: ci/test-py314.sh runs it in Docker
      SUITE=sid FORCE="${NO_CACHE:-0}" "$REPO_ROOT/ci/build-base-image.sh" || return 1
      ctx="$(aux_context "$name" "$REPO_ROOT/pyproject.toml" "$REPO_ROOT/README.md")" || return 1
      BASE_IMAGE=local/debian:sid docker_build "$tag" "$ctx" "$IMAGES_DIR/py314-tests.Dockerfile" ||
        return 1
      return 0
      ;;
    hermes-standin) # never pushed: the base of agent-on-upstream where upstream's is unreachable
      SUITE=sid FORCE="${NO_CACHE:-0}" "$REPO_ROOT/ci/build-base-image.sh" || return 1
      ctx="$(aux_context "$name" "$IMAGES_DIR/standin-requirements.txt")" || return 1
      BASE_IMAGE=local/debian:sid docker_build "$tag" "$ctx" "$IMAGES_DIR/hermes-standin.Dockerfile" ||
        return 1
      return 0
      ;;
    agent-on-upstream) # never pushed: the image tier runs it in Docker
      local base="${HERMES_BASE_IMAGE:-}"
      if [[ -z "$base" ]]; then
        build_one hermes-standin || return 1
        base="$(tag_of hermes-standin)"
      fi
      build_one agent || return 1
      docker_build "$tag" "$REPO_ROOT" "$REPO_ROOT/Dockerfile.upstream" \
        "AGENT_IMAGE=$(tag_of agent)" "HERMES_BASE_IMAGE=$base" || return 1
      smoke_test_agent "$tag" || return 1
      return 0
      ;;
    busybox)
      ctx="$(aux_context "$name" /bin/busybox)" || return 1
      docker build -q -t "$tag" -f "$IMAGES_DIR/busybox.Dockerfile" "$ctx" >/dev/null || return 1
      ;;
    kube-state-metrics)
      # Built once into the add-ons' cache (nothing to do when there); Docker's cache then
      # keys the image on the binary's content.
      "$REPO_ROOT/ci/k8s/build-addons.sh" kube-state-metrics || return 1
      ctx="$(aux_context "$name" "$(source "$REPO_ROOT/ci/k8s/env.sh" && echo "$K8S_BIN")/$name")" ||
        return 1
      docker build -q -t "$tag" -f "$IMAGES_DIR/$name.Dockerfile" "$ctx" >/dev/null || return 1
      ;;
  esac
  push "$name" "$tag" || return 1
}

manifest_url() { # TAG: its manifest in REGISTRY, which may carry a path (host:port/team)
  local host="${REGISTRY%%/*}" path=""
  [[ "$REGISTRY" == */* ]] && path="${REGISTRY#*/}/"
  echo "http://$host/v2/$path${1%:*}/manifests/${1##*:}"
}

push() { # NAME TAG: push REGISTRY/TAG when the image changed since its last push
  [[ "${NO_PUSH:-0}" == 1 ]] && return 0
  local name="$1" tag="$2" id stamp remote
  id="$(docker image inspect -f '{{.Id}}' "$tag")" || return 1
  remote="$REGISTRY/$tag"
  stamp="$STAMPS/$(echo "$remote" | tr '/:' '__')"
  [[ -f "$stamp" && "$(cat "$stamp")" == "$id" ]] && curl -fsS -o /dev/null \
    "$(manifest_url "$tag")" 2>/dev/null && return 0
  docker tag "$tag" "$remote" || return 1
  docker push -q "$remote" >/dev/null || {
    log "push of $remote failed: is the registry up (make cluster starts it; REGISTRY=... for yours)?"
    return 1
  }
  echo "$id" >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
}

log_base_image() {
  # Which base every image was built FROM, in the build log: the local image's ID (a
  # debootstrapped base differs from machine to machine), or the digest a registry base is
  # pinned to.
  local id
  if id="$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE" 2>/dev/null)"; then
    log "base image $BASE_IMAGE: ID $id"
  elif [[ "$BASE_IMAGE" == *@sha256:* ]]; then
    log "base image $BASE_IMAGE: pulled by digest during the build"
  else
    log "base image $BASE_IMAGE: pulled by tag during the build, NOT pinned by digest"
  fi
}

take_lock() {
  # One build at a time on this machine: `make test` builds and pushes in the background while
  # the image tests ask for the same images, and both would install Docker, debootstrap a
  # missing base image and rewrite ci/images/build-ca. The second waits, then finds everything
  # in the cache.
  mkdir -p "$(dirname "$LOCK")"
  exec 9>"$LOCK"
  flock -n 9 && return 0
  log "waiting for another ci/build-images.sh to finish (lock $LOCK, held by PID $(lock_holders))"
  flock -w "${BUILD_LOCK_WAIT_SECONDS:-3600}" 9 && return 0
  log "gave up after ${BUILD_LOCK_WAIT_SECONDS:-3600} s: $LOCK is still held by PID $(lock_holders)"
  exit 1
}

lock_holders() { # the PIDs with the lock file open (other than this shell), for the message
  local link pids=()
  for link in /proc/[0-9]*/fd/*; do
    [[ "$(readlink "$link" 2>/dev/null)" == "$(readlink -f "$LOCK")" ]] || continue
    link="${link#/proc/}"
    [[ "${link%%/*}" == "$$" ]] || pids+=("${link%%/*}")
  done
  echo "${pids[*]:-unknown}"
}

main() {
  local wanted=("$@") name started failed=()
  ((${#wanted[@]})) || wanted=("${ALL[@]}")
  for name in "${wanted[@]}"; do
    tag_of "$name" >/dev/null || {
      log "unknown image '$name' (known: ${ALL[*]})"
      exit 2
    }
  done
  take_lock
  "$REPO_ROOT/ci/install-docker.sh"
  if [[ "$BASE_IMAGE" == local/debian:bookworm ]]; then
    FORCE="${NO_CACHE:-0}" "$REPO_ROOT/ci/build-base-image.sh"
  fi
  log_base_image
  mkdir -p "$STAMPS"
  copy_build_cas
  WORK="$(mktemp -d /tmp/hermes-image-contexts.XXXXXX)"
  trap 'rm -rf "$WORK"' EXIT
  for name in "${wanted[@]}"; do
    started=$(date +%s)
    if build_one "$name"; then
      log "$(tag_of "$name") built in $(($(date +%s) - started)) s"
    else
      log "FAILED: $(tag_of "$name")"
      failed+=("$name")
    fi
  done
  if ((${#failed[@]})); then
    log "not built: ${failed[*]}"
    exit 1
  fi
}

main "$@"

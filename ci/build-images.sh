#!/usr/bin/env bash
# Build every image the project needs with no container registry, and `docker save` each into
# .cache/images/<name>.tar for the cluster (ci/k8s/load-images.sh imports them into containerd).
#
# Usage: ci/build-images.sh [IMAGE...]   IMAGE in: agent git-sync git-server seaweedfs openbao
#                                        fake-llm pause (default: all)
# Env:   BASE_IMAGE    base for every Debian-based image (default: local/debian:bookworm, built
#                      by ci/build-base-image.sh; e.g. python:3.11-slim-bookworm where Docker
#                      Hub is reachable)
#        NO_SAVE=1     skip the tarballs (image tests only need the images in Docker)
#        NO_CACHE=1    cold build: ignore Docker's layer cache and re-debootstrap the base
#
# git-sync is the stand-in (ci/images/git-sync/git_sync.py), a test double of upstream git-sync
# v4 for machines where registry.k8s.io/git-sync/git-sync cannot be pulled (docs/plugins.md).
#
# Cached: Docker's layer cache makes a warm run quick, and a tarball is rewritten only when its
# image ID changed. An image that cannot be built is reported, the others are still built, and
# the script exits 1 at the end.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGES_DIR="$REPO_ROOT/ci/images"
OUT_DIR="$REPO_ROOT/.cache/images"
BASE_IMAGE="${BASE_IMAGE:-local/debian:bookworm}"
ALL=(agent git-sync git-server seaweedfs openbao fake-llm pause)
export DOCKER_BUILDKIT=0 # the legacy builder: Debian's docker.io 20.10 has no buildx plugin

log() { echo "build-images: $*" >&2; }

tag_of() {
  case "$1" in
    agent) echo hermes-runtime/agent:dev ;;
    git-sync) echo hermes-runtime/git-sync:v4 ;;
    pause) echo hermes-runtime/pause:3.10 ;;
    git-server | seaweedfs | openbao | fake-llm) echo "hermes-runtime/$1:dev" ;;
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

docker_build() { # TAG CONTEXT DOCKERFILE
  local cache=()
  [[ "${NO_CACHE:-0}" == 1 ]] && cache=(--no-cache)
  docker build "${cache[@]}" --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" -q \
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

# Runs inside `if`, where bash ignores `set -e`: every step carries its own `|| return 1`.
build_one() {
  local name="$1" tag ctx
  tag="$(tag_of "$name")"
  case "$name" in
    agent)
      docker_build "$tag" "$REPO_ROOT" "$REPO_ROOT/Dockerfile" || return 1
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
    seaweedfs | openbao)
      ctx="$(aux_context "$name")" || return 1
      docker_build "$tag" "$ctx" "$IMAGES_DIR/$name.Dockerfile" || return 1
      ;;
    pause)
      ctx="$(aux_context "$name" /usr/bin/catatonit)" || return 1
      docker build -q -t "$tag" -f "$IMAGES_DIR/pause.Dockerfile" "$ctx" >/dev/null || return 1
      ;;
  esac
  save_tarball "$name" "$tag" || return 1
}

save_tarball() { # NAME TAG: rewrite the tarball only when the image changed
  [[ "${NO_SAVE:-0}" == 1 ]] && return 0
  local name="$1" tag="$2" id tar stamp
  id="$(docker image inspect -f '{{.Id}}' "$tag")" || return 1
  tar="$OUT_DIR/${name}.tar"
  stamp="$tar.id"
  if [[ -f "$tar" && -f "$stamp" && "$(cat "$stamp")" == "$id" ]]; then
    return 0
  fi
  docker save -o "$tar.tmp" "$tag" || return 1
  mv -f "$tar.tmp" "$tar" || return 1
  echo "$id" >"$stamp"
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
  "$REPO_ROOT/ci/install-docker.sh"
  if [[ "$BASE_IMAGE" == local/debian:bookworm ]]; then
    FORCE="${NO_CACHE:-0}" "$REPO_ROOT/ci/build-base-image.sh"
  fi
  mkdir -p "$OUT_DIR"
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

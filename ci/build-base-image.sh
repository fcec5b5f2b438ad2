#!/usr/bin/env bash
# Build the local base image `local/debian:bookworm` with no registry: debootstrap a minimal
# Debian root filesystem from the apt mirror this machine already uses, then import it into
# the container engine: Docker (image builds) or, with ENGINE=podman, podman (the kind path).
# SUITE=sid builds `local/debian:sid`, the base of the Python 3.14 images (Debian's sid is
# the suite that carries python3.14; the host itself stays on bookworm).
# Cached: does nothing when the image already exists (FORCE=1 rebuilds).
set -euo pipefail
ENGINE="${ENGINE:-docker}"
SUITE="${SUITE:-bookworm}"
IMAGE="${BASE_IMAGE_NAME:-local/debian:$SUITE}"

log() { echo "build-base-image: $*" >&2; }

mirror_url() {
  # The deb822 sources file names the mirror on a "URIs:" line; fall back to the classic format.
  local uri
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  if [[ -z "$uri" && -f /etc/apt/sources.list ]]; then
    uri=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

if [[ "${FORCE:-0}" != 1 ]] && "$ENGINE" image inspect "$IMAGE" >/dev/null 2>&1; then
  log "$IMAGE exists (FORCE=1 rebuilds): ID $("$ENGINE" image inspect -f '{{.Id}}' "$IMAGE")"
  exit 0
fi

command -v debootstrap >/dev/null || { log "debootstrap is missing: run ci/install-docker.sh"; exit 1; }
rootfs=$(mktemp -d /tmp/hermes-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
mirror=$(mirror_url)
log "debootstrap $SUITE from $mirror"
start=$(date +%s)
debootstrap --variant=minbase "$SUITE" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
  tail -n 30 "$rootfs.log" >&2
  exit 1
}
rm -f "$rootfs.log"
# Keep the image small: apt lists and caches are re-fetched by any build that installs packages.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
# Security updates live in a separate suite; include it so images get fixed packages (sid,
# the development suite, has neither).
if [[ "$SUITE" == sid ]]; then
  echo "deb $mirror sid main" >"$rootfs/etc/apt/sources.list"
else
  cat >"$rootfs/etc/apt/sources.list" <<SOURCES
deb $mirror $SUITE main
deb $mirror $SUITE-updates main
deb ${mirror%/debian}/debian-security $SUITE-security main
SOURCES
fi
tar -C "$rootfs" -c . | "$ENGINE" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  - "$IMAGE" >/dev/null
log "built $IMAGE in $(($(date +%s) - start)) s: ID $("$ENGINE" image inspect -f '{{.Id}}' "$IMAGE")"

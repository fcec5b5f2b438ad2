#!/usr/bin/env bash
# Make a Docker engine available with no registry: Debian's docker.io + containerd + runc,
# and dockerd started by hand in the background (these machines have no systemd).
# Idempotent: installs only what is missing and starts dockerd only if `docker info` fails.
# Also installs the tools the image builds need (debootstrap for the base image,
# catatonit for the pause image, busybox-static for the e2e probe image).
set -euo pipefail

STATE_DIR="${HERMES_DOCKER_STATE_DIR:-/var/lib/docker}"
LOG_FILE="${HERMES_DOCKER_LOG:-/var/log/hermes-dockerd.log}"
PACKAGES=(docker.io containerd runc debootstrap catatonit busybox-static ca-certificates iptables)

log() { echo "install-docker: $*" >&2; }

sudo_if_needed() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

install_missing_packages() {
  local missing=() pkg
  for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo_if_needed apt-get update -qq
  sudo_if_needed apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

close_inherited_fds() { # every descriptor above stderr of this (sub)shell
  local fd
  for fd in /proc/"$BASHPID"/fd/*; do
    fd="${fd##*/}"
    ((fd > 2)) && eval "exec $fd>&-"
  done
  return 0
}

daemon_is_up() { docker info >/dev/null 2>&1; }

start_dockerd() {
  daemon_is_up && return 0
  log "starting dockerd (runc runtime, log: $LOG_FILE)"
  # crun refuses this VM's hybrid cgroups; Debian's dockerd defaults to runc already,
  # the flag makes that explicit. setsid: the daemon outlives the calling shell. The daemon
  # keeps no descriptor of its caller: an inherited one would hold ci/build-images.sh's flock
  # (every later build waited forever) or a pipe its caller reads to EOF (subprocess.run).
  # Nor its caller's TMPDIR: a test's temporary folder, deleted when the test ends, would
  # break every later `docker exec` (runc writes the process spec there).
  (
    close_inherited_fds
    sudo_if_needed env -u TMPDIR setsid /usr/sbin/dockerd --data-root "$STATE_DIR" \
      --default-runtime runc >>"$LOG_FILE" 2>&1 </dev/null
  ) &
  local waited=0
  until daemon_is_up; do
    sleep 1
    waited=$((waited + 1))
    if ((waited > 60)); then
      log "dockerd did not answer within 60 s; last log lines:"
      tail -n 30 "$LOG_FILE" >&2 || true
      exit 1
    fi
  done
  log "dockerd is up after ${waited} s"
}

install_missing_packages
start_dockerd

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

# DOCKER_HOST (unix:// only) and HERMES_DOCKERD_ARGS start a daemon of one's own beside the
# machine's (tests/image/test_docker_start.py does: a second daemon, its own socket, exec root
# and pid file under the state dir).
dockerd_command() {
  local command=(env -u TMPDIR setsid /usr/sbin/dockerd --data-root "$STATE_DIR" --default-runtime runc)
  if [[ "${DOCKER_HOST:-}" == unix://* ]]; then
    command+=(-H "$DOCKER_HOST" --exec-root "$STATE_DIR/exec" --pidfile "$STATE_DIR/dockerd.pid")
  fi
  # shellcheck disable=SC2206 # word splitting is the point: extra flags, space separated
  command+=(${HERMES_DOCKERD_ARGS:-})
  [[ $(id -u) -eq 0 ]] || command=(sudo "${command[@]}")
  printf '%s\0' "${command[@]}"
}

start_dockerd() {
  daemon_is_up && return 0
  log "starting dockerd (runc runtime, log: $LOG_FILE)"
  local command=()
  mapfile -d '' command < <(dockerd_command)
  # crun refuses this VM's hybrid cgroups; Debian's dockerd defaults to runc already,
  # the flag makes that explicit. setsid: the daemon outlives the calling shell.
  # The daemon keeps no descriptor of its caller, and neither does any shell between them: the
  # subshell's own stdin, stdout and stderr are redirected before it runs (redirections on the
  # subshell itself, so bash keeps no saved copies of the caller's), it closes every other
  # inherited descriptor and then execs the daemon. An inherited descriptor held
  # ci/build-images.sh's flock (every later build waited forever); a copy of a pipe's write end
  # (fds 10 and 11, bash's saved stdout and stderr around a redirected function call, kept for
  # the daemon's whole life) meant a caller reading that pipe to end of file never returned:
  # `make demo` hung on a fresh machine after building its images.
  # Nor its caller's TMPDIR: a test's temporary folder, deleted when the test ends, would
  # break every later `docker exec` (runc writes the process spec there).
  (
    close_inherited_fds
    exec "${command[@]}"
  ) >>"$LOG_FILE" 2>&1 </dev/null &
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

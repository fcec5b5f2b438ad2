#!/usr/bin/env bash
# Runs a background job beside a foreground command, and waits for both. `make test` uses it to
# compile the cluster's Go binaries (ci/kind/build-node-image.sh binaries: many minutes of
# compiling on a cold machine, nothing when cached) while the foreground installs the venv and
# builds the images, which mostly wait on the network; the test tiers start only after both, so
# no timing-sensitive test ever runs beside a compiler (docs/cluster.md, "Cold start").
#
# Usage: ci/with-background.sh NAME LOG 'BACKGROUND COMMAND' FOREGROUND COMMAND...
# The background job's output goes to LOG (its tail is printed if it fails). Exit status: the
# foreground's when it fails (the background job is stopped then), else the background job's.
set -euo pipefail
name="$1" log="$2" background="$3"
shift 3
log_line() { echo "with-background: $name: $*" >&2; }

mkdir -p "$(dirname "$log")"
start=$(date +%s)
set -m # the job gets a process group of its own, so stopping it stops its compilers too
bash -c "$background" >"$log" 2>&1 &
job=$!
set +m
log_line "started (pid $job, log $log)"
stop_job() { kill -- "-$job" 2>/dev/null || true; wait "$job" 2>/dev/null || true; }
trap 'stop_job; exit 130' INT TERM

status=0
"$@" || status=$?
if ((status)); then
  log_line "stopping it: the foreground command failed (exit $status)"
  stop_job
  exit "$status"
fi
log_line "foreground done in $(($(date +%s) - start)) s; waiting for the background job"
wait "$job" || status=$?
if ((status)); then
  log_line "failed (exit $status); the end of $log:"
  tail -n 40 "$log" >&2
  exit "$status"
fi
log_line "done in $(($(date +%s) - start)) s"

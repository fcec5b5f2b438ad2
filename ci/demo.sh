#!/usr/bin/env bash
# make demo: a Hermes agent on Kubernetes, end to end, from a fresh machine.
#
#   1. tools (helm, kubectl) and the images the demo needs (agent, fake-llm, git-server, pause)
#   2. the cluster: ci/cluster-up.sh when KUBECONFIG is not set, else the user's cluster as is
#   3. namespace hermes-demo (Pod Security "restricted"), the fake LLM (or a real endpoint)
#   4. helm upgrade --install of charts/hermes-agent with values-examples/dev.yaml + overrides
#   5. a short conversation through the Hermes API server, printed
#   6. a backup job from the chart's CronJob, then `backup list` of the backup volume
#   7. what to do next
#
# Idempotent: run it again and it upgrades the same release in place, adds one more backup.
# Env (all optional):
#   DEMO_NAMESPACE (hermes-demo)  DEMO_RELEASE (hermes-agent)
#   DEMO_LLM_BASE_URL, DEMO_LLM_MODEL   a real OpenAI-compatible endpoint instead of the fake LLM
#   DEMO_LLM_API_KEY_SECRET             existing Secret (key `api-key`) in DEMO_NAMESPACE holding
#                                       that endpoint's key; never pass a key on the command line
#   REGISTRY (localhost:5001)           where images are pushed and pulled from; with your own
#                                       KUBECONFIG, a registry that cluster pulls from
#   DEMO_SKIP_IMAGES=1                  do not build/push images (they are in REGISTRY already)
# On any failure the script prints the namespace's pods, events and logs, and exits non-zero.
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NS="${DEMO_NAMESPACE:-hermes-demo}"
RELEASE="${DEMO_RELEASE:-hermes-agent}"
CHART="$ROOT/charts/hermes-agent"
BACKENDS_CHART="$ROOT/tests/e2e/charts/ci-backends"
OWN_KUBECONFIG="$ROOT/.cache/kind/kubeconfig"
REGISTRY="${REGISTRY:-localhost:5001}"
APP_VERSION="$(awk -F'"' '/^appVersion:/ {print $2}' "$CHART/Chart.yaml")"
AGENT_IMAGE="$REGISTRY/hermes-runtime/agent:$APP_VERSION"
PY="$ROOT/.venv/bin/python" # has httpx; `make demo` creates the venv first
export PATH="$ROOT/.venv/bin:$ROOT/.cache/tools/bin:$PATH"
STARTED=$(date +%s)
WORK="$(mktemp -d /tmp/hermes-demo.XXXXXX)"
PF_PID=""

step() { echo "demo [$(($(date +%s) - STARTED))s] ==> $*" >&2; }
info() { echo "demo:    $*" >&2; }

cleanup() {
  [[ -n "$PF_PID" ]] && kill "$PF_PID" 2>/dev/null
  rm -rf "$WORK"
  return 0
}

diagnostics() {
  local rc=$?
  trap - ERR
  echo >&2
  echo "demo: FAILED (exit $rc) after $(($(date +%s) - STARTED)) s; what the namespace $NS shows:" >&2
  if [[ -n "${KUBECONFIG:-}" ]] && kubectl get ns "$NS" >/dev/null 2>&1; then
    kubectl -n "$NS" get pods,jobs,pvc -o wide >&2 || true
    echo "--- events (latest 30)" >&2
    kubectl -n "$NS" get events --sort-by=.lastTimestamp 2>/dev/null | tail -n 30 >&2 || true
    local pod
    for pod in $(kubectl -n "$NS" get pods -o name 2>/dev/null); do
      echo "--- logs of $pod (all containers, last 60 lines each)" >&2
      kubectl -n "$NS" logs "$pod" --all-containers --prefix --tail=60 >&2 || true
    done
  fi
  exit "$rc"
}
trap cleanup EXIT
trap diagnostics ERR

fail() {
  echo "demo: $*" >&2
  false
}

# --- 1. tools and images -----------------------------------------------------------------
ensure_tools() {
  if ! command -v helm >/dev/null || ! command -v kubectl >/dev/null; then
    step "installing helm and kubectl into .cache/tools"
    "$ROOT/ci/install-tools.sh" "$ROOT/.cache/tools"
  fi
}

demo_images() {
  # The fake LLM's chart (ci-backends) also runs a git server.
  if [[ -n "${DEMO_LLM_BASE_URL:-}" ]]; then echo agent; else echo agent fake-llm git-server; fi
}

build_images() {
  [[ "${DEMO_SKIP_IMAGES:-0}" == 1 ]] && return 0
  # shellcheck disable=SC2046
  step "building images: $(demo_images), pushing to $REGISTRY (cached: quick when nothing changed)"
  # Docker's legacy builder warns on every image: keep the script's own lines only.
  # shellcheck disable=SC2046
  REGISTRY="$REGISTRY" "$ROOT/ci/build-images.sh" $(demo_images) 2>&1 |
    { grep -v -e DEPRECATED -e 'BuildKit is currently' -e 'environment-variable' -e '^$' >&2 || true; }
}

# --- 2. cluster --------------------------------------------------------------------------
ensure_cluster() {
  if [[ -z "${KUBECONFIG:-}" || "$KUBECONFIG" == "$OWN_KUBECONFIG" ]]; then
    step "local cluster: ci/cluster-up.sh (kind + the local registry; quick when it runs)"
    "$ROOT/ci/cluster-up.sh" >/dev/null
    export KUBECONFIG="$OWN_KUBECONFIG"
  else
    [[ "$REGISTRY" != localhost:5001 || "${DEMO_SKIP_IMAGES:-0}" == 1 ]] ||
      fail "with your own KUBECONFIG, set REGISTRY to a registry that cluster pulls from"
    step "using your cluster (KUBECONFIG=$KUBECONFIG), images from $REGISTRY"
  fi
  kubectl get nodes -o wide >&2
}

# --- 3. namespace and LLM ----------------------------------------------------------------
ensure_namespace() {
  step "namespace $NS (Pod Security: restricted, enforced)"
  kubectl create namespace "$NS" --dry-run=client -o yaml |
    kubectl label --local -f - -o yaml \
      pod-security.kubernetes.io/enforce=restricted \
      pod-security.kubernetes.io/warn=restricted |
    kubectl apply -f - >/dev/null
}

llm_values() { # writes the llm: overrides; the key only ever travels inside a Secret
  if [[ -n "${DEMO_LLM_BASE_URL:-}" ]]; then
    kubectl -n "$NS" get secret "$DEMO_LLM_API_KEY_SECRET" >/dev/null ||
      fail "Secret $NS/$DEMO_LLM_API_KEY_SECRET (DEMO_LLM_API_KEY_SECRET) not found"
    step "LLM: $DEMO_LLM_BASE_URL, model $DEMO_LLM_MODEL, key from Secret $DEMO_LLM_API_KEY_SECRET"
    printf 'llm:\n  baseUrl: %s\n  model: %s\n  existingSecret: %s\n' \
      "$DEMO_LLM_BASE_URL" "$DEMO_LLM_MODEL" "$DEMO_LLM_API_KEY_SECRET"
  else
    step "LLM: the deterministic fake OpenAI-compatible server (tests/e2e/charts/ci-backends)"
    helm upgrade --install backends "$BACKENDS_CHART" -n "$NS" --set-json 'plugins={}' \
      --wait --timeout 3m >/dev/null
    # dev.yaml names the Secret hermes-llm; the fake LLM accepts any key.
    kubectl -n "$NS" create secret generic hermes-llm --from-literal=api-key=fake-llm-accepts-any-key \
      --dry-run=client -o yaml | kubectl apply -f - >/dev/null
    printf 'llm:\n  baseUrl: http://fake-llm:8080/v1\n  model: fake-model\n  existingSecret: hermes-llm\n'
  fi
}

# --- 4. the chart ------------------------------------------------------------------------
write_overrides() { # what cannot work here, on top of values-examples/dev.yaml
  {
    cat <<'EOF'
agent:
  startupProbe:
    periodSeconds: 5
    timeoutSeconds: 5
    failureThreshold: 120
EOF
    # The agent image this script built and pushed (REGISTRY/hermes-runtime/agent:<appVersion>).
    printf 'image:\n  registry: %s\n  pullPolicy: Always\n' "$REGISTRY"
    llm_values
  } >"$WORK/overrides.yaml"
}

install_chart() {
  step "helm upgrade --install $RELEASE (values-examples/dev.yaml + demo overrides), waiting for Ready"
  helm upgrade --install "$RELEASE" "$CHART" -n "$NS" \
    -f "$ROOT/values-examples/dev.yaml" -f "$WORK/overrides.yaml" \
    --wait --timeout 5m >/dev/null
  kubectl -n "$NS" rollout status "deployment/$FULLNAME" --timeout=5m >&2
  kubectl -n "$NS" get pods -l "app.kubernetes.io/instance=$RELEASE,app.kubernetes.io/component=agent" \
    -o wide >&2
}

# --- 5. conversation ---------------------------------------------------------------------
free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

port_forward() {
  PORT="$(free_port)"
  step "port-forward svc/$FULLNAME -> 127.0.0.1:$PORT"
  kubectl -n "$NS" port-forward "svc/$FULLNAME" "$PORT:8642" >"$WORK/port-forward.log" 2>&1 &
  PF_PID=$!
  for _ in $(seq 1 60); do
    curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    kill -0 "$PF_PID" 2>/dev/null || break
    sleep 0.5
  done
  cat "$WORK/port-forward.log" >&2
  fail "port-forward to svc/$FULLNAME did not answer /health"
}

converse() {
  step "a short conversation through the Hermes API server (/v1/chat/completions)"
  # The key goes to Python through the environment, never through a process argument.
  API_SERVER_KEY="$(kubectl -n "$NS" get secret "$FULLNAME-api" -o jsonpath='{.data.api-key}' | base64 -d)"
  [[ -n "$API_SERVER_KEY" ]] || fail "Secret $NS/$FULLNAME-api has no api-key"
  # The fake LLM calls a tool when the message carries [[tool:NAME {args}]]: the last turn makes
  # the agent search its own lossless memory with LCM's lcm_grep tool, as a real model would.
  local recall="What was the codeword I gave you? Use your lcm_grep tool to look it up."
  if [[ -z "${DEMO_LLM_BASE_URL:-}" ]]; then
    recall="$recall [[tool:lcm_grep {\"query\": \"codeword\"}]]"
    info "the fake LLM echoes; [[tool:...]] in a message makes it call that tool (a real model decides itself)"
  fi
  API_SERVER_KEY="$API_SERVER_KEY" DEMO_URL="http://127.0.0.1:$PORT/v1/chat/completions" \
    DEMO_RECALL="$recall" "$PY" - <<'EOF'
import os
import sys

import httpx

turns = [
    "Hello! I am trying out the Hermes runtime on Kubernetes.",
    "Please remember the codeword blue-harbor-42 for later.",
    os.environ["DEMO_RECALL"],
]
headers = {"Authorization": f"Bearer {os.environ['API_SERVER_KEY']}"}
messages: list[dict[str, str]] = []
with httpx.Client(timeout=300) as client:
    for text in turns:
        messages.append({"role": "user", "content": text})
        reply = client.post(
            os.environ["DEMO_URL"],
            headers=headers,
            json={"model": "hermes-agent", "messages": messages},
        )
        if reply.status_code != 200:
            sys.exit(f"demo: /v1/chat/completions answered {reply.status_code}: {reply.text[:500]}")
        answer = reply.json()["choices"][0]["message"]["content"] or ""
        messages.append({"role": "assistant", "content": answer})
        print(f"  you   > {text}")
        answer = " ".join(answer.split())
        print(f"  agent > {answer if len(answer) <= 400 else answer[:400] + ' ...'}")
EOF
}

show_memory() {
  step "the conversation in LCM's lossless store (lcm grep inside the pod)"
  kubectl -n "$NS" exec "deployment/$FULLNAME" -c agent -- \
    hermes-runtime lcm grep --db /opt/data/lcm.db --limit 5 codeword
}

# --- 6. backup ---------------------------------------------------------------------------
wait_job() { # JOB: poll until Complete or Failed (kubectl wait takes one condition only)
  local job="$1" state
  for _ in $(seq 1 300); do
    state="$(kubectl -n "$NS" get job "$job" \
      -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}')"
    [[ "$state" == *Complete* ]] && return 0
    [[ "$state" == *Failed* ]] && fail "job $job failed"
    sleep 1
  done
  fail "job $job did not finish within 300 s"
}

backup_now() {
  local cronjob="$FULLNAME-backup" job
  job="${cronjob:0:40}-demo-$(date +%s)" # a Job name must fit a 63-character label
  step "backup now: kubectl create job --from=cronjob/$cronjob $job"
  kubectl -n "$NS" create job --from="cronjob/$cronjob" "$job" >/dev/null
  wait_job "$job"
  info "job $job complete; its log:"
  kubectl -n "$NS" logs "job/$job" | sed 's/^/  /' >&2
}

list_backups() {
  local pod
  pod="$FULLNAME-backup-list-$(date +%s)"
  step "backup list + verify --snapshot latest (a short pod on the backup volume, file:///backup)"
  kubectl -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $pod
  labels: {app.kubernetes.io/part-of: hermes-demo}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  securityContext:
    runAsNonRoot: true
    runAsUser: 10000
    runAsGroup: 10000
    fsGroup: 10000
    seccompProfile: {type: RuntimeDefault}
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              app.kubernetes.io/instance: $RELEASE
              app.kubernetes.io/component: agent
  containers:
    - name: list
      image: $AGENT_IMAGE
      imagePullPolicy: IfNotPresent
      command:
        - /bin/sh
        - -c
        - hermes-runtime backup list --target file:///backup &&
          hermes-runtime backup verify --target file:///backup --snapshot latest
      env: [{name: HOME, value: /tmp}]
      envFrom: [{secretRef: {name: $FULLNAME-backup-password}}] # the restic repository's password
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities: {drop: [ALL]}
      volumeMounts:
        - {name: backup, mountPath: /backup} # verify records its result there
        - {name: tmp, mountPath: /tmp}
  volumes:
    - name: backup
      persistentVolumeClaim: {claimName: $FULLNAME-backup}
    - name: tmp
      emptyDir: {}
EOF
  local phase=""
  for _ in $(seq 1 180); do
    phase="$(kubectl -n "$NS" get pod "$pod" -o jsonpath='{.status.phase}')"
    [[ "$phase" == Succeeded || "$phase" == Failed ]] && break
    sleep 1
  done
  kubectl -n "$NS" logs "$pod" -c list | sed 's/^/  /'
  [[ "$phase" == Succeeded ]] || fail "pod $pod ended $phase"
  kubectl -n "$NS" delete pod "$pod" --wait=false >/dev/null
}

# --- 7. next steps -----------------------------------------------------------------------
summary() {
  local elapsed=$(($(date +%s) - STARTED))
  cat <<EOF

demo: done in ${elapsed} s. The agent runs as release $RELEASE in namespace $NS.
Next steps (export KUBECONFIG=$KUBECONFIG; helm and kubectl are in $ROOT/.cache/tools/bin):

  Talk to it:
    kubectl -n $NS port-forward svc/$FULLNAME 8642:8642 &
    export API_SERVER_KEY=\$(kubectl -n $NS get secret $FULLNAME-api -o jsonpath='{.data.api-key}' | base64 -d)
    curl -s http://127.0.0.1:8642/v1/chat/completions -H "Authorization: Bearer \$API_SERVER_KEY" \\
      -H 'Content-Type: application/json' \\
      -d '{"model": "hermes-agent", "messages": [{"role": "user", "content": "hello"}]}'

  Search its lossless memory (LCM) inside the pod:
    kubectl -n $NS exec deploy/$FULLNAME -c agent -- hermes-runtime lcm grep --db /opt/data/lcm.db codeword
    kubectl -n $NS exec deploy/$FULLNAME -c agent -- hermes-runtime lcm stats --db /opt/data/lcm.db

  Backups (CronJob $FULLNAME-backup, to the PVC $FULLNAME-backup at file:///backup):
    kubectl -n $NS create job --from=cronjob/$FULLNAME-backup $FULLNAME-backup-manual
    hermes-runtime backup list|verify --target file:///backup
      (in a pod that mounts that PVC at /backup: the demo's list_backups step in ci/demo.sh)
    restore: helm upgrade $RELEASE charts/hermes-agent -n $NS --reuse-values --set restore.fromSnapshot=latest
             on an EMPTY data volume (runbook: docs/backup.md)

  Metrics:
    kubectl -n $NS port-forward svc/$FULLNAME-metrics 9090:9090 &
    curl -s http://127.0.0.1:9090/metrics

  Uninstall: helm -n $NS uninstall $RELEASE backends   (keeps the data PVC: helm.sh/resource-policy)
    and everything, data included: kubectl delete namespace $NS
  Stop the local cluster: make cluster-down
EOF
}

check_inputs() { # a usage error stops before anything is touched (exit 2)
  local problem=""
  if [[ -n "${DEMO_LLM_BASE_URL:-}" ]]; then
    [[ "$DEMO_LLM_BASE_URL" =~ ^https?:// ]] || problem="DEMO_LLM_BASE_URL must start with http:// or https://"
    [[ -n "${DEMO_LLM_MODEL:-}" ]] || problem="DEMO_LLM_BASE_URL is set but DEMO_LLM_MODEL is empty"
    [[ -n "${DEMO_LLM_API_KEY_SECRET:-}" ]] ||
      problem="DEMO_LLM_BASE_URL is set but DEMO_LLM_API_KEY_SECRET (a Secret in $NS with key api-key) is empty"
  fi
  [[ -x "$PY" ]] || problem="$PY not found: run \`make demo\` (it creates the venv first)"
  [[ "$NS" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || problem="DEMO_NAMESPACE '$NS' is not a valid namespace name"
  [[ "$RELEASE" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || problem="DEMO_RELEASE '$RELEASE' is not a valid release name"
  if [[ -n "$problem" ]]; then
    trap - ERR
    echo "demo: $problem" >&2
    exit 2
  fi
}

main() {
  check_inputs
  FULLNAME="$RELEASE"
  [[ "$RELEASE" == *hermes-agent* ]] || FULLNAME="$RELEASE-hermes-agent"
  ensure_tools
  ensure_cluster
  build_images
  ensure_namespace
  write_overrides
  install_chart
  port_forward
  converse
  show_memory
  backup_now
  list_backups
  summary
}

main "$@"

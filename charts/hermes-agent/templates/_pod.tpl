{{/*
Pieces shared by the agent pod, the backup CronJob and the restore init container,
so security settings and volumes are defined once (the pattern of Grafana's _pod.tpl).
*/}}

{{- define "hermes-agent.paths.data" -}}/opt/data{{- end -}}
{{- /* Each consumer's own in-memory volume, mounted read-only here; its file is <dir>/env. */ -}}
{{- define "hermes-agent.paths.secretsDir" -}}/run/hermes/secrets{{- end -}}
{{- define "hermes-agent.paths.secretsEnv" -}}/run/hermes/secrets/env{{- end -}}
{{- /* Where plugins' git-sync trees are: an emptyDir, read-only in the agent. */ -}}
{{- define "hermes-agent.paths.gitSync" -}}/opt/data/.git-sync{{- end -}}
{{- define "hermes-agent.paths.apiKey" -}}/run/hermes/api-key/api-key{{- end -}}
{{- define "hermes-agent.paths.controlSocket" -}}/run/hermes-runtime/agent.sock{{- end -}}
{{- define "hermes-agent.paths.vaultToken" -}}/var/run/secrets/hermes-runtime/vault/token{{- end -}}
{{- define "hermes-agent.paths.vaultCa" -}}/etc/hermes-runtime-vault-ca/ca.crt{{- end -}}
{{- /* The backup's read-write view of the data volume's .hermes-runtime folder, where it records
its outcome for the agent's /metrics, when the data volume itself is mounted read-only. */ -}}
{{- define "hermes-agent.paths.backupStatusDir" -}}/run/hermes/backup-status{{- end -}}

{{/*
Pod-level settings every pod shares: identity, security context, pull secrets. Pass
(dict "root" $ "identity" "agent"|"backup"|"pre-upgrade"): the agent pod's ServiceAccount (also
the `helm test` pod's, which holds nothing) or the backup pods' own (the pre-upgrade hook's is a
hook of its own), so Vault's Kubernetes auth tells them apart (vault.role, vault.backupRole)
and neither can log in as the other.
*/}}
{{- define "hermes-agent.podCommon" -}}
{{- $root := .root -}}
{{- if eq .identity "pre-upgrade" }}
serviceAccountName: {{ include "hermes-agent.preUpgradeServiceAccountName" $root }}
automountServiceAccountToken: {{ $root.Values.backup.serviceAccount.automountServiceAccountToken }}
{{- else if eq .identity "backup" }}
serviceAccountName: {{ include "hermes-agent.backupServiceAccountName" $root }}
automountServiceAccountToken: {{ $root.Values.backup.serviceAccount.automountServiceAccountToken }}
{{- else }}
serviceAccountName: {{ include "hermes-agent.serviceAccountName" $root }}
automountServiceAccountToken: {{ $root.Values.serviceAccount.automountServiceAccountToken }}
{{- end }}
securityContext:
  {{- include "hermes-agent.podSecurityContext" $root | nindent 2 }}
{{- include "hermes-agent.imagePullSecrets" $root }}
{{- with concat $root.Values.allPods.tolerations $root.Values.agent.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Environment every container of ours gets. */}}
{{- define "hermes-agent.commonEnv" -}}
- name: HERMES_HOME
  value: {{ include "hermes-agent.paths.data" . }}
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
{{- with .Values.allPods.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
A consumer's Vault env file (agent, backup, restore, replicate): the variable that names it
and the read-only mount of its own in-memory volume, only when Vault renders something for
it. No container ever mounts another consumer's volume. Pass (dict "root" $ "consumer" "agent").
*/}}
{{- define "hermes-agent.secretsEnvVar" -}}
{{- if include "hermes-agent.vaultEnvsFor" . }}
- name: HERMES_RUNTIME_SECRETS_ENV
  value: {{ include "hermes-agent.paths.secretsEnv" .root }}
{{- end }}
{{- end -}}

{{- define "hermes-agent.secretsMount" -}}
{{- if include "hermes-agent.vaultEnvsFor" . }}
- name: {{ printf "secrets-%s" .consumer }}
  mountPath: {{ include "hermes-agent.paths.secretsDir" .root }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* S3 settings for the backup, prune and restore commands (credentials never in args). */}}
{{- define "hermes-agent.backupEnv" -}}
{{- include "hermes-agent.backupTargetEnv" . }}
{{- if not (include "hermes-agent.backupPasswordFromVault" .) }}
- name: RESTIC_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "hermes-agent.backupPasswordSecret" . }}
      key: RESTIC_PASSWORD
{{- end }}
{{- end -}}

{{/*
The target, the agent whose snapshots and replicas every verb acts on (hermes-agent.backupAgent)
and the target's S3 settings, without the repository password (the replication sidecar's).
*/}}
{{- define "hermes-agent.backupTargetEnv" -}}
- name: BACKUP_TARGET
  value: {{ include "hermes-agent.backupTargetUrl" . | quote }}
- name: HERMES_RUNTIME_AGENT
  value: {{ include "hermes-agent.backupAgent" . | quote }}
{{- if eq .Values.backup.target.type "s3" }}
{{- with .Values.backup.target.s3 }}
- name: AWS_REGION
  value: {{ .region | quote }}
{{- if .endpoint }}
- name: AWS_ENDPOINT_URL
  value: {{ .endpoint | quote }}
{{- end }}
{{- if .existingSecret }}
- name: AWS_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: AWS_ACCESS_KEY_ID
- name: AWS_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .existingSecret }}
      key: AWS_SECRET_ACCESS_KEY
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
Volumes: data (unless .noData), one /tmp per role of the pod (.tmp, a list: `tmp-<role>`, so no
two roles ever share a writable scratch folder: the agent's shell cannot plant or swap a file
another role writes there and then trusts), seed files, one in-memory secrets volume per
consumer Vault renders for (.vault, a list) with the Vault token and CA, backup PVC.
*/}}
{{- define "hermes-agent.volumes" -}}
{{- $root := .root -}}
{{- if not .noData }}
- name: data
{{- if $root.Values.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "hermes-agent.dataClaimName" $root }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- end }}
{{- range .tmp }}
- name: {{ printf "tmp-%s" . }}
  emptyDir:
    sizeLimit: {{ $root.Values.agent.tmpSizeLimit }}
{{- end }}
- name: seed
  configMap:
    name: {{ include "hermes-agent.fullname" $root }}
{{- range .vault }}
- name: {{ printf "secrets-%s" . }}
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
{{- if .vault }}
- name: vault-token
  projected:
    sources:
      - serviceAccountToken:
          audience: {{ $root.Values.vault.audience }}
          expirationSeconds: 3600
          path: token
{{- if $root.Values.vault.caSecret }}
- name: vault-ca
  secret:
    secretName: {{ $root.Values.vault.caSecret }}
    defaultMode: 0444
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end }}
{{- if and .backup (eq $root.Values.backup.target.type "pvc") }}
- name: backup
  persistentVolumeClaim:
    claimName: {{ include "hermes-agent.backupClaimName" $root }}
{{- end }}
{{- end -}}

{{/*
Data, the consumer's own /tmp and its own secrets file; pass (dict "root" $ "consumer" "agent"),
with "readOnly" true for a consumer that only reads the data volume.
*/}}
{{- define "hermes-agent.dataMounts" -}}
- name: data
  mountPath: {{ include "hermes-agent.paths.data" .root }}
  {{- if .readOnly }}
  readOnly: true
  {{- end }}
- name: {{ printf "tmp-%s" .consumer }}
  mountPath: /tmp
{{- include "hermes-agent.secretsMount" . }}
{{- end -}}

{{/*
Vault render: the init container (refresh=false) or the refresher sidecar (refresh=true),
logging in with .role (vault.role in the agent pod, vault.backupRole in the backup pods).
One login, one file per consumer of the pod (.consumers, those with at least one variable):
`--out-only <dir>/<consumer>/env=NAMES` on that consumer's own volume, so the refresher keeps
every file fresh and rewrites a file only when one of its own values changes. Only the
variables some consumer of this pod needs are read from Vault.
*/}}
{{- define "hermes-agent.vaultContainer" -}}
{{- $root := .root -}}
{{- $v := $root.Values.vault -}}
{{- $consumers := .consumers -}}
- name: {{ ternary "vault-refresher" "vault-render" .refresh }}
  image: {{ include "hermes-agent.agentImage" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  {{- if .native }}
  restartPolicy: Always
  {{- end }}
  {{- /* args only: the image's ENTRYPOINT (catatonit, PID 1, reaps orphans) stays. */}}
  args:
    - hermes-runtime
    - vault
    - render
    - --addr
    - {{ $v.address | quote }}
    - --auth
    - kubernetes
    - --role
    - {{ .role | quote }}
    - --auth-path
    - {{ $v.authPath | quote }}
    - --audience
    - {{ $v.audience | quote }}
    - --jwt-file
    - {{ include "hermes-agent.paths.vaultToken" $root }}
    {{- if $v.caSecret }}
    - --ca-cert
    - {{ include "hermes-agent.paths.vaultCa" $root }}
    {{- end }}
    {{- range $v.secrets }}
    {{- $for := include "hermes-agent.vaultSecretConsumers" . | fromJsonArray }}
    {{- $needed := false }}
    {{- range $consumers }}{{ if has . $for }}{{ $needed = true }}{{ end }}{{ end }}
    {{- if $needed }}
    - --secret
    - {{ printf "%s#%s=%s" .path .key .env | quote }}
    {{- end }}
    {{- end }}
    {{- range $consumers }}
    - --out-only
    - {{ printf "%s/%s/env=%s" (include "hermes-agent.paths.secretsDir" $root) . (include "hermes-agent.vaultEnvsFor" (dict "root" $root "consumer" .)) | quote }}
    {{- end }}
    {{- if .refresh }}
    - --refresh
    - {{ $v.refresher.interval | quote }}
    {{- end }}
  env:
    - name: HOME
      value: /tmp
    {{- include "hermes-agent.commonEnv" $root | nindent 4 }}
  securityContext:
    {{- include "hermes-agent.roleSecurityContext" (dict "root" $root "role" "vault") | nindent 4 }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  volumeMounts:
    - name: tmp-vault
      mountPath: /tmp
    {{- range $consumers }}
    - name: {{ printf "secrets-%s" . }}
      mountPath: {{ printf "%s/%s" (include "hermes-agent.paths.secretsDir" $root) . }}
    {{- end }}
    - name: vault-token
      mountPath: {{ dir (include "hermes-agent.paths.vaultToken" $root) }}
      readOnly: true
    {{- if $v.caSecret }}
    - name: vault-ca
      mountPath: {{ dir (include "hermes-agent.paths.vaultCa" $root) }}
      readOnly: true
    {{- end }}
{{- end -}}

{{/*
The first words of args for hermes-runtime: when Vault renders variables for this consumer,
a shell that loads its own env file (S3 credentials) first. "$@" keeps every argument a
separate word: no value is ever re-parsed by the shell. Every container of ours sets args,
never command, so the image's ENTRYPOINT (catatonit as PID 1, which reaps orphans) stays.
Pass (dict "root" $ "consumer" "restore").
*/}}
{{- define "hermes-agent.withSecrets" -}}
{{- if include "hermes-agent.vaultEnvsFor" . }}
- /bin/sh
- -c
- 'set -a && . "$HERMES_RUNTIME_SECRETS_ENV" && set +a && exec "$@"'
- with-secrets
{{- end }}
- hermes-runtime
{{- end -}}

{{/*
The backup pods' first init container with a repository on the backup volume: a repository
an earlier version wrote as the agent's UID (mode 0600/0700) is opened to the pod's group, so
the backup roles (their own UIDs, in the group) can read and extend it. It runs as that UID
and holds no credential; it changes only what that UID owns and the group cannot read yet,
so after the first run it finds nothing to do. restic keeps new files group-accessible once
the repository's config is (its DeriveModesFromFileInfo).
*/}}
{{- define "hermes-agent.repositoryAccessContainer" -}}
- name: repository-access
  image: {{ include "hermes-agent.agentImage" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- /* args only: the image's ENTRYPOINT (catatonit, PID 1) stays. */}}
  args:
    - sh
    - -c
    - find /backup -xdev -user "$(id -u)" ! -perm -g+r -exec chmod g+rwX {} +
  securityContext:
    {{- include "hermes-agent.roleSecurityContext" (dict "root" . "role" "agent") | nindent 4 }}
  resources:
    requests:
      cpu: 10m
      memory: 16Mi
    limits:
      memory: 64Mi
  volumeMounts:
    - name: backup
      mountPath: /backup
{{- end -}}

{{/* Restore init container: fills an EMPTY data volume from a snapshot, never twice. */}}
{{- define "hermes-agent.restoreContainer" -}}
- name: restore
  image: {{ include "hermes-agent.agentImage" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    {{- include "hermes-agent.withSecrets" (dict "root" . "consumer" "restore") | nindent 4 }}
    - backup
    - restore
    - --target
    - $(BACKUP_TARGET)
    - --snapshot
    - {{ .Values.restore.fromSnapshot | quote }}
    {{- with .Values.restore.fromAgent }}
    - --agent
    - {{ . | quote }}
    {{- end }}
    {{- if and .Values.restore.fromReplicas .Values.backup.continuous.enabled }}
    - --replicas
    - $(BACKUP_TARGET)/litestream
    {{- end }}
    - --data-dir
    - {{ include "hermes-agent.paths.data" . }}
    - --if-empty
  env:
    - name: HOME
      value: /tmp
    {{- include "hermes-agent.commonEnv" . | nindent 4 }}
    {{- include "hermes-agent.secretsEnvVar" (dict "root" . "consumer" "restore") | nindent 4 }}
    {{- include "hermes-agent.backupEnv" . | nindent 4 }}
  securityContext:
    {{- include "hermes-agent.roleSecurityContext" (dict "root" . "role" "restore") | nindent 4 }}
  resources:
    {{- toYaml .Values.restore.resources | nindent 4 }}
  volumeMounts:
    {{- include "hermes-agent.dataMounts" (dict "root" . "consumer" "restore") | nindent 4 }}
    {{- if eq .Values.backup.target.type "pvc" }}
    - name: backup
      mountPath: /backup
      readOnly: true
    {{- end }}
{{- end -}}

{{/*
The backup script: create then prune. Every value reaches the commands through
environment variables, so nothing from values.yaml is parsed by the shell.
Pass (dict "root" $ "job" JOB "labels" list): JOB "scheduled" (create then prune, once: the
CronJob), "loop" (the same every backup.interval: the sidecar), "pre-upgrade" (create with
labels, no prune: the pre-upgrade hook), "verify" (the weekly full check of the latest).
*/}}
{{- define "hermes-agent.backupScript" -}}
{{- $b := .root.Values.backup -}}
{{- $job := default "scheduled" .job -}}
{{- /* restic's own time limit, inside the Job's deadline, so a store that stops answering
fails the run with the failure recorded (HermesBackupFailed), not a pod killed silently. */ -}}
{{- $timeout := int $b.timeoutSeconds -}}
{{- if eq $job "pre-upgrade" }}{{ $timeout = min $timeout (sub (int $b.preUpgrade.activeDeadlineSeconds) 60) }}{{ end -}}
set -eu
if [ -n "${HERMES_RUNTIME_SECRETS_ENV:-}" ]; then set -a; . "$HERMES_RUNTIME_SECRETS_ENV"; set +a; fi
{{- if eq $job "verify" }}
{{- /* The weekly full check: restore the latest snapshot to scratch, integrity_check every
database (FTS5's included), compare each with its recorded SHA-256 (docs/backup.md, "Checks"). */}}
hermes-runtime backup verify --target "$BACKUP_TARGET" --snapshot latest --work-dir "$BACKUP_WORK_DIR"
{{- else }}
backup_once() {
  hermes-runtime backup create --data-dir "$HERMES_HOME" --target "$BACKUP_TARGET" --work-dir "$BACKUP_WORK_DIR" --status-file "$BACKUP_STATUS_FILE" --timeout {{ $timeout }}{{ range $b.excludes }} --exclude {{ squote . }}{{ end }}{{ range .labels }} --label {{ squote . }}{{ end }}{{ if ne $job "pre-upgrade" }} &&
  hermes-runtime backup prune --target "$BACKUP_TARGET" --keep-last {{ int $b.retention.keepLast }}{{ if $b.retention.keepDaily }} --keep-daily {{ int $b.retention.keepDaily }}{{ end }}{{ if $b.retention.keepWeekly }} --keep-weekly {{ int $b.retention.keepWeekly }}{{ end }}{{ end }}
}
{{- if eq $job "loop" }}
trap 'exit 0' TERM INT
while :; do
  sleep {{ int $b.interval }} & wait $!
  backup_once || echo '{"event": "backup.failed", "retry_in_seconds": {{ int $b.interval }}}' >&2
done
{{- else }}
backup_once
{{- end }}
{{- end }}
{{- end -}}

{{- define "hermes-agent.backupContainer" -}}
{{- $root := .root -}}
- name: backup
  image: {{ include "hermes-agent.agentImage" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  args:
    - /bin/sh
    - -c
    - |
      {{- include "hermes-agent.backupScript" . | nindent 6 }}
  env:
    - name: HOME
      value: /tmp
    {{- include "hermes-agent.commonEnv" $root | nindent 4 }}
    {{- include "hermes-agent.secretsEnvVar" (dict "root" $root "consumer" "backup") | nindent 4 }}
    {{- include "hermes-agent.backupEnv" $root | nindent 4 }}
    {{- if ne .job "verify" }}
    - name: BACKUP_STATUS_FILE
      value: {{ include "hermes-agent.backupStatusFile" $root }}
    {{- end }}
    - name: BACKUP_WORK_DIR
      value: {{ include "hermes-agent.paths.backupScratch" . }}
    - name: RESTIC_CACHE_DIR
      value: {{ include "hermes-agent.paths.backupScratch" . }}/restic-cache
  securityContext:
    {{- include "hermes-agent.roleSecurityContext" (dict "root" $root "role" "backup") | nindent 4 }}
  resources:
    {{- toYaml $root.Values.backup.resources | nindent 4 }}
  volumeMounts:
    {{- if eq .job "verify" }}
    {{- /* The weekly check restores to scratch: it never reads or writes the data volume. */}}
    - name: tmp-backup
      mountPath: /tmp
    {{- include "hermes-agent.secretsMount" (dict "root" $root "consumer" "backup") | nindent 4 }}
    {{- else }}
    {{- include "hermes-agent.dataMounts" (dict "root" $root "consumer" "backup" "readOnly" $root.Values.backup.dataVolumeReadOnly) | nindent 4 }}
    {{- if $root.Values.backup.dataVolumeReadOnly }}
    {{- /* The one folder it writes: its outcome record, read by the agent's /metrics. */}}
    - name: data
      mountPath: {{ include "hermes-agent.paths.backupStatusDir" $root }}
      subPath: {{ dir (include "hermes-agent.paths.backupStatus" $root) }}
    {{- end }}
    {{- end }}
    - name: backup-scratch
      mountPath: {{ include "hermes-agent.paths.backupScratch" . }}
    {{- if eq $root.Values.backup.target.type "pvc" }}
    - name: backup
      mountPath: /backup
    {{- end }}
{{- end -}}


{{/*
Continuous replication (backup.continuous): `hermes-runtime backup replicate` runs Litestream
over every SQLite database of the data volume, to <backup target>/litestream/<agent>/. A native sidecar
(an init container with restartPolicy Always, after the restore init container, so it never
replicates a volume that is being restored), or a plain container where native sidecars are
off. It needs the target's S3 settings but not the restic password. Pass (dict "root" $ "native" bool).
*/}}
{{- define "hermes-agent.replicateContainer" -}}
{{- $root := .root -}}
{{- $c := $root.Values.backup.continuous -}}
- name: replicate
  image: {{ include "hermes-agent.agentImage" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  {{- if .native }}
  restartPolicy: Always
  {{- end }}
  args:
    {{- include "hermes-agent.withSecrets" (dict "root" $root "consumer" "replicate") | nindent 4 }}
    - backup
    - replicate
    - --data-dir
    - {{ include "hermes-agent.paths.data" $root }}
    - --target
    - $(BACKUP_TARGET)
    - --sync-interval
    - {{ $c.syncInterval | quote }}
    - --work-dir
    - /tmp
    {{- range $root.Values.backup.excludes }}
    - --exclude
    - {{ . | quote }}
    {{- end }}
  env:
    - name: HOME
      value: /tmp
    {{- include "hermes-agent.commonEnv" $root | nindent 4 }}
    {{- include "hermes-agent.secretsEnvVar" (dict "root" $root "consumer" "replicate") | nindent 4 }}
    {{- include "hermes-agent.backupTargetEnv" $root | nindent 4 }}
  securityContext:
    {{- include "hermes-agent.roleSecurityContext" (dict "root" $root "role" "replicate") | nindent 4 }}
  resources:
    {{- toYaml $c.resources | nindent 4 }}
  volumeMounts:
    {{- include "hermes-agent.dataMounts" (dict "root" $root "consumer" "replicate") | nindent 4 }}
    {{- if eq $root.Values.backup.target.type "pvc" }}
    - name: backup
      mountPath: /backup
    {{- end }}
{{- end -}}

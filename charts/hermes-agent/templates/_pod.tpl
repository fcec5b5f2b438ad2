{{/*
Pieces shared by the agent pod, the backup CronJob and the restore init container,
so security settings and volumes are defined once (the pattern of Grafana's _pod.tpl).
*/}}

{{- define "hermes-agent.paths.data" -}}/opt/data{{- end -}}
{{- define "hermes-agent.paths.secretsEnv" -}}/run/hermes/secrets/env{{- end -}}
{{- define "hermes-agent.paths.vaultToken" -}}/var/run/secrets/hermes-runtime/vault/token{{- end -}}
{{- define "hermes-agent.paths.vaultCa" -}}/etc/hermes-runtime-vault-ca/ca.crt{{- end -}}

{{/* Pod-level settings every pod shares: identity, security context, pull secrets. */}}
{{- define "hermes-agent.podCommon" -}}
serviceAccountName: {{ include "hermes-agent.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountServiceAccountToken }}
securityContext:
  {{- include "hermes-agent.podSecurityContext" . | nindent 2 }}
{{- include "hermes-agent.imagePullSecrets" . }}
{{- with concat .Values.allPods.tolerations .Values.agent.tolerations }}
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
{{- if .Values.vault.enabled }}
- name: HERMES_RUNTIME_SECRETS_ENV
  value: {{ include "hermes-agent.paths.secretsEnv" . }}
{{- end }}
{{- with .Values.allPods.extraEnv }}
{{ toYaml . }}
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

{{/* The target and its S3 settings without the repository password (the replication sidecar's). */}}
{{- define "hermes-agent.backupTargetEnv" -}}
- name: BACKUP_TARGET
  value: {{ include "hermes-agent.backupTargetUrl" . | quote }}
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

{{/* Volumes: data, scratch, in-memory secrets, seed files, Vault token and CA, backup PVC. */}}
{{- define "hermes-agent.volumes" -}}
{{- $root := .root -}}
- name: data
{{- if $root.Values.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "hermes-agent.dataClaimName" $root }}
{{- else }}
  emptyDir: {}
{{- end }}
- name: tmp
  emptyDir:
    sizeLimit: {{ $root.Values.agent.tmpSizeLimit }}
- name: secrets
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
- name: seed
  configMap:
    name: {{ include "hermes-agent.fullname" $root }}
{{- if $root.Values.vault.enabled }}
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

{{- define "hermes-agent.dataMounts" -}}
- name: data
  mountPath: {{ include "hermes-agent.paths.data" . }}
- name: tmp
  mountPath: /tmp
- name: secrets
  mountPath: /run/hermes/secrets
{{- end -}}

{{/* Vault render: the init container (refresh=false) or the refresher sidecar (refresh=true). */}}
{{- define "hermes-agent.vaultContainer" -}}
{{- $root := .root -}}
{{- $v := $root.Values.vault -}}
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
    - {{ $v.role | quote }}
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
    - --secret
    - {{ printf "%s#%s=%s" .path .key .env | quote }}
    {{- end }}
    - --out
    - {{ include "hermes-agent.paths.secretsEnv" $root }}
    {{- if .refresh }}
    - --refresh
    - {{ $v.refresher.interval | quote }}
    {{- end }}
  env:
    - name: HOME
      value: /tmp
    {{- include "hermes-agent.commonEnv" $root | nindent 4 }}
  securityContext:
    {{- include "hermes-agent.containerSecurityContext" (dict "root" $root) | nindent 4 }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  volumeMounts:
    - name: tmp
      mountPath: /tmp
    - name: secrets
      mountPath: /run/hermes/secrets
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
The first words of args for hermes-runtime: with Vault on, a shell that loads the
Vault-rendered env file (S3 credentials) first. "$@" keeps every argument a separate word:
no value is ever re-parsed by the shell. Every container of ours sets args, never command,
so the image's ENTRYPOINT (catatonit as PID 1, which reaps orphans) stays.
*/}}
{{- define "hermes-agent.withSecrets" -}}
{{- if .Values.vault.enabled }}
- /bin/sh
- -c
- 'set -a && . "$HERMES_RUNTIME_SECRETS_ENV" && set +a && exec "$@"'
- with-secrets
{{- end }}
- hermes-runtime
{{- end -}}

{{/* Restore init container: fills an EMPTY data volume from a snapshot, never twice. */}}
{{- define "hermes-agent.restoreContainer" -}}
- name: restore
  image: {{ include "hermes-agent.agentImage" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    {{- include "hermes-agent.withSecrets" . | nindent 4 }}
    - backup
    - restore
    - --target
    - $(BACKUP_TARGET)
    - --snapshot
    - {{ .Values.restore.fromSnapshot | quote }}
    - --data-dir
    - {{ include "hermes-agent.paths.data" . }}
    - --if-empty
  env:
    - name: HOME
      value: /tmp
    {{- include "hermes-agent.commonEnv" . | nindent 4 }}
    {{- include "hermes-agent.backupEnv" . | nindent 4 }}
  securityContext:
    {{- include "hermes-agent.containerSecurityContext" (dict "root" .) | nindent 4 }}
  resources:
    {{- toYaml .Values.restore.resources | nindent 4 }}
  volumeMounts:
    {{- include "hermes-agent.dataMounts" . | nindent 4 }}
    {{- if eq .Values.backup.target.type "pvc" }}
    - name: backup
      mountPath: /backup
      readOnly: true
    {{- end }}
{{- end -}}

{{/*
The backup script: create then prune. Every value reaches the commands through
environment variables, so nothing from values.yaml is parsed by the shell.
Pass (dict "root" $ "loop" bool).
*/}}
{{- define "hermes-agent.backupScript" -}}
{{- $b := .root.Values.backup -}}
set -eu
if [ -n "${HERMES_RUNTIME_SECRETS_ENV:-}" ]; then set -a; . "$HERMES_RUNTIME_SECRETS_ENV"; set +a; fi
backup_once() {
  hermes-runtime backup create --data-dir "$HERMES_HOME" --target "$BACKUP_TARGET" --work-dir "$BACKUP_WORK_DIR" --status-file "$HERMES_HOME/{{ include "hermes-agent.paths.backupStatus" . }}"{{ range $b.excludes }} --exclude {{ squote . }}{{ end }} &&
  hermes-runtime backup prune --target "$BACKUP_TARGET" --keep-last {{ int $b.retention.keepLast }}{{ if $b.retention.keepDaily }} --keep-daily {{ int $b.retention.keepDaily }}{{ end }}{{ if $b.retention.keepWeekly }} --keep-weekly {{ int $b.retention.keepWeekly }}{{ end }}
}
{{- if .loop }}
trap 'exit 0' TERM INT
while :; do
  sleep {{ int $b.interval }} & wait $!
  backup_once || echo '{"event": "backup.failed", "retry_in_seconds": {{ int $b.interval }}}' >&2
done
{{- else }}
backup_once
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
    {{- include "hermes-agent.backupEnv" $root | nindent 4 }}
    - name: BACKUP_WORK_DIR
      value: {{ include "hermes-agent.paths.backupScratch" . }}
    - name: RESTIC_CACHE_DIR
      value: {{ include "hermes-agent.paths.backupScratch" . }}/restic-cache
  securityContext:
    {{- include "hermes-agent.containerSecurityContext" (dict "root" $root) | nindent 4 }}
  resources:
    {{- toYaml $root.Values.backup.resources | nindent 4 }}
  volumeMounts:
    {{- include "hermes-agent.dataMounts" $root | nindent 4 }}
    - name: backup-scratch
      mountPath: {{ include "hermes-agent.paths.backupScratch" . }}
    {{- if eq $root.Values.backup.target.type "pvc" }}
    - name: backup
      mountPath: /backup
    {{- end }}
{{- end -}}


{{/*
Continuous replication (backup.continuous): `hermes-runtime backup replicate` runs Litestream
over every SQLite database of the data volume, to <backup target>/litestream/. A native sidecar
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
    {{- include "hermes-agent.withSecrets" $root | nindent 4 }}
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
    {{- include "hermes-agent.backupTargetEnv" $root | nindent 4 }}
  securityContext:
    {{- include "hermes-agent.containerSecurityContext" (dict "root" $root) | nindent 4 }}
  resources:
    {{- toYaml $c.resources | nindent 4 }}
  volumeMounts:
    {{- include "hermes-agent.dataMounts" $root | nindent 4 }}
    {{- if eq $root.Values.backup.target.type "pvc" }}
    - name: backup
      mountPath: /backup
    {{- end }}
{{- end -}}

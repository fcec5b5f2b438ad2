{{/* Names, labels and images shared by every template (Bitnami "common" conventions). */}}

{{- define "hermes-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hermes-agent.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hermes-agent.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable across upgrades, so they never include the chart version. */}}
{{- define "hermes-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hermes-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hermes-agent.labels" -}}
helm.sh/chart: {{ include "hermes-agent.chart" . }}
{{ include "hermes-agent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hermes-runtime
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Metadata annotations block shared by all objects; pass (dict "root" $ "extra" $map). */}}
{{- define "hermes-agent.annotations" -}}
{{- $all := merge (deepCopy (default (dict) .extra)) (deepCopy .root.Values.commonAnnotations) -}}
{{- if $all -}}
annotations:
  {{- toYaml $all | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "hermes-agent.metricsServiceName" -}}
{{- printf "%s-metrics" (include "hermes-agent.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hermes-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hermes-agent.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Image reference from {registry,repository,tag,digest}; pass (dict "image" $img "default" $tag "global" $.Values.global).
global.imageRegistry wins over the image's own registry, as in Bitnami's common.images.image.
*/}}
{{- define "hermes-agent.imageRef" -}}
{{- $registry := .image.registry -}}
{{- with .global }}{{ with .imageRegistry }}{{ $registry = . }}{{ end }}{{ end -}}
{{- $repo := .image.repository -}}
{{- if $registry -}}{{- $repo = printf "%s/%s" (trimSuffix "/" $registry) .image.repository -}}{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default .default .image.tag | toString) -}}
{{- end -}}
{{- end -}}

{{/* Pull secrets of every pod: global.imagePullSecrets then imagePullSecrets, names or {name} items, without repeats. */}}
{{- define "hermes-agent.imagePullSecrets" -}}
{{- $names := list -}}
{{- $global := list -}}
{{- with .Values.global }}{{ $global = default (list) .imagePullSecrets }}{{ end -}}
{{- range concat $global (default (list) .Values.imagePullSecrets) -}}
{{- if kindIs "map" . }}{{ $names = append $names .name }}{{ else }}{{ $names = append $names . }}{{ end -}}
{{- end -}}
{{- with $names | uniq }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* storageClassName line for a PVC: its own class, else global.storageClass / global.defaultStorageClass; "-" means "" (no class). */}}
{{- define "hermes-agent.storageClass" -}}
{{- $class := .class -}}
{{- if not $class -}}
{{- with .root.Values.global }}{{ $class = default .defaultStorageClass .storageClass }}{{ end -}}
{{- end -}}
{{- if eq (toString $class) "-" }}
storageClassName: ""
{{- else if $class }}
storageClassName: {{ $class | quote }}
{{- end }}
{{- end -}}

{{- define "hermes-agent.agentImage" -}}
{{- include "hermes-agent.imageRef" (dict "image" .Values.image "default" .Chart.AppVersion "global" .Values.global) -}}
{{- end -}}

{{- define "hermes-agent.gitSyncImage" -}}
{{- include "hermes-agent.imageRef" (dict "image" .Values.gitSync.image "default" "v4.7.0" "global" .Values.global) -}}
{{- end -}}

{{- define "hermes-agent.dataClaimName" -}}
{{- default (printf "%s-data" (include "hermes-agent.fullname" .)) .Values.persistence.existingClaim -}}
{{- end -}}

{{- define "hermes-agent.backupClaimName" -}}
{{- default (printf "%s-backup" (include "hermes-agent.fullname" .)) .Values.backup.target.pvc.existingClaim -}}
{{- end -}}

{{- define "hermes-agent.apiSecretName" -}}
{{- default (printf "%s-api" (include "hermes-agent.fullname" .)) .Values.apiServer.existingSecret -}}
{{- end -}}

{{/* "true" when a Vault secret supplies the env var named .env; pass (dict "root" $ "env" "NAME"). */}}
{{- define "hermes-agent.vaultProvides" -}}
{{- $found := false -}}
{{- if .root.Values.vault.enabled -}}
{{- range .root.Values.vault.secrets -}}
{{- if eq .env $.env -}}{{- $found = true -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- ternary "true" "" $found -}}
{{- end -}}

{{/* "true" when the chart owns the API key Secret (no existingSecret, no Vault-provided key). */}}
{{- define "hermes-agent.createApiSecret" -}}
{{- if and (not .Values.apiServer.existingSecret) (not (include "hermes-agent.vaultProvides" (dict "root" . "env" "API_SERVER_KEY"))) -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when the gateway serves LCM's own /metrics (the engine runs there, not in the supervisor). */}}
{{- define "hermes-agent.lcmMetrics" -}}
{{- if and .Values.metrics.enabled .Values.lcm.enabled -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when sidecars are native (init containers with restartPolicy Always). */}}
{{- define "hermes-agent.nativeSidecars" -}}
{{- if eq .Values.sidecarMode "native" -}}
true
{{- else if and (eq .Values.sidecarMode "auto") (semverCompare ">=1.29.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end -}}

{{/* The Secret holding RESTIC_PASSWORD: backup.repository.existingSecret, else the one the chart keeps. */}}
{{- define "hermes-agent.backupPasswordSecret" -}}
{{- default (printf "%s-backup-password" (include "hermes-agent.fullname" .) | trunc 63 | trimSuffix "-") .Values.backup.repository.existingSecret -}}
{{- end -}}

{{/* "true" when RESTIC_PASSWORD comes from the Vault env file: asked for, or listed in vault.secrets. */}}
{{- define "hermes-agent.backupPasswordFromVault" -}}
{{- if or .Values.backup.repository.fromVault (include "hermes-agent.vaultProvides" (dict "root" . "env" "RESTIC_PASSWORD")) -}}
true
{{- end -}}
{{- end -}}

{{- define "hermes-agent.backupTargetUrl" -}}
{{- if eq .Values.backup.target.type "s3" -}}
{{- printf "s3://%s/%s" .Values.backup.target.s3.bucket (trimAll "/" .Values.backup.target.s3.prefix) | trimSuffix "/" -}}
{{- else -}}
file:///backup
{{- end -}}
{{- end -}}

{{/* Security context of a container: the shared restricted one, with optional overrides. */}}
{{- define "hermes-agent.containerSecurityContext" -}}
{{- $ctx := deepCopy .root.Values.allPods.containerSecurityContext -}}
{{- with .override }}{{- $ctx = mergeOverwrite $ctx (deepCopy .) -}}{{- end }}
{{- if include "hermes-agent.platformUids" .root }}{{- $ctx = omit $ctx "runAsUser" "runAsGroup" "seLinuxOptions" -}}{{- end }}
{{- toYaml $ctx -}}
{{- end -}}

{{/*
TCP ports of a list of URLs (explicit port, else by scheme; git@host: is SSH) plus extra
ports, sorted and unique, as a JSON array. Pass (dict "urls" $list "extra" $ints).
*/}}
{{- define "hermes-agent.egressPorts" -}}
{{- $ports := list -}}
{{- range .urls -}}
{{- if hasPrefix "git@" . -}}
{{- $ports = append $ports 22 -}}
{{- else -}}
{{- $u := urlParse . -}}
{{- $hostport := splitList ":" $u.host -}}
{{- if gt (len $hostport) 1 -}}
{{- $ports = append $ports (last $hostport | int) -}}
{{- else if eq $u.scheme "http" -}}
{{- $ports = append $ports 80 -}}
{{- else if eq $u.scheme "git" -}}
{{- $ports = append $ports 9418 -}}
{{- else if eq $u.scheme "ssh" -}}
{{- $ports = append $ports 22 -}}
{{- else if eq $u.scheme "https" -}}
{{- $ports = append $ports 443 -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range .extra }}{{ $ports = append $ports (int .) }}{{ end -}}
{{- $ports | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/* Egress rules: DNS anywhere, then the given TCP ports to networkPolicy.egressTo (or anywhere), then extraEgress. */}}
{{- define "hermes-agent.egressRules" -}}
{{- $np := .root.Values.networkPolicy -}}
- ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
{{- if .ports }}
- ports:
    {{- range .ports }}
    - port: {{ int . }}
      protocol: TCP
    {{- end }}
  {{- with $np.egressTo }}
  to:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- with $np.extraEgress }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
"true" when UIDs are left to the platform (OpenShift's SCC assigns them from the namespace's
range): global.compatibility.openshift.adaptSecurityContext force, or auto on a cluster that
serves security.openshift.io/v1. Same key and meaning as Bitnami's common chart.
*/}}
{{- define "hermes-agent.platformUids" -}}
{{- $mode := "auto" -}}
{{- with .Values.global }}{{ with .compatibility }}{{ with .openshift }}{{ $mode = default "auto" .adaptSecurityContext }}{{ end }}{{ end }}{{ end -}}
{{- if or (eq $mode "force") (and (eq $mode "auto") (.Capabilities.APIVersions.Has "security.openshift.io/v1")) -}}
true
{{- end -}}
{{- end -}}

{{/* Pod security context of every pod, without UIDs when the platform assigns them. */}}
{{- define "hermes-agent.podSecurityContext" -}}
{{- $ctx := deepCopy .Values.allPods.podSecurityContext -}}
{{- if include "hermes-agent.platformUids" . }}{{- $ctx = omit $ctx "runAsUser" "runAsGroup" "fsGroup" "seLinuxOptions" -}}{{- end }}
{{- toYaml $ctx -}}
{{- end -}}

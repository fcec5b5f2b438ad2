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

{{/*
The name of one of the release's objects (or of its client label key): <fullname>-<suffix>, at
most .max characters (default 63, a DNS-1123 label and a label key's name; 52 for a CronJob,
whose Jobs add 11). A name that does not fit keeps its whole suffix, which tells the release's
objects apart, and the fullname is cut to make room for an 8-character hash of it, which
tells apart two releases whose names differ only past the cut: `trunc 63` alone gave the
backup and verify CronJobs one name from 38 characters, and the Services one name from 50.
A name that fits is unchanged. Every object name is built here or is the fullname itself
(Bitnami's convention). Pass (dict "root" $ "suffix" "backup") or with "max" 52.
*/}}
{{- define "hermes-agent.componentName" -}}
{{- $full := include "hermes-agent.fullname" .root -}}
{{- $max := int (default 63 .max) -}}
{{- $name := printf "%s-%s" $full .suffix -}}
{{- if gt (len $name) $max -}}
{{- $keep := int (sub $max (add (len .suffix) 10)) -}}
{{- $name = printf "%s-%s-%s" (regexReplaceAll "[-.]+$" ($full | trunc $keep) "") (sha256sum $full | trunc 8) .suffix -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/* A CronJob's name: at most 52 characters (its Jobs' names add 11). Pass (dict "root" $ "suffix" "backup"). */}}
{{- define "hermes-agent.cronJobName" -}}
{{- include "hermes-agent.componentName" (dict "root" .root "suffix" .suffix "max" 52) -}}
{{- end -}}

{{/* The label that lets a pod call the API with networkPolicy.ingress.api=clients: `<fullname>-client`, at most 63. */}}
{{- define "hermes-agent.clientLabel" -}}
{{- include "hermes-agent.componentName" (dict "root" . "suffix" "client") -}}
{{- end -}}

{{- define "hermes-agent.metricsServiceName" -}}
{{- include "hermes-agent.componentName" (dict "root" . "suffix" "metrics") -}}
{{- end -}}

{{/*
The agent whose snapshots and replicas every backup verb of this release acts on
(HERMES_RUNTIME_AGENT, docs/backup.md "Many agents, one target"): backup.agentName, else
<namespace>.<release>, unique in a cluster, so releases sharing a bucket, prefix and password
never prune, restore or replicate each other's data. Never read from the data volume: the
agent could then choose whose snapshots its backup pod prunes.
*/}}
{{- define "hermes-agent.backupAgent" -}}
{{- default (printf "%s.%s" .Release.Namespace .Release.Name) .Values.backup.agentName -}}
{{- end -}}

{{/*
A number from "<namespace>/<release>": the first 32 bits of its SHA-256 (the same at every
render, so `helm template` twice gives the same text and GitOps sees no diff). Not adler32sum:
the sums of two similar names differ only in their low bits, so hours and days taken from
them cluster.
*/}}
{{- define "hermes-agent.releaseHash" -}}
{{- printf "0x%s" (printf "%s/%s" .Release.Namespace .Release.Name | sha256sum | trunc 8) | int64 -}}
{{- end -}}

{{/*
A cron schedule with `H` in the minute, hour or day-of-week field replaced by a number taken
from hermes-agent.releaseHash (Jenkins' `H`): minute h mod 60, hour (h / 60) mod 24,
day-of-week (h / 1440) mod 7. So releases with the same values do not all start their
backups, verifies and scratch volumes at one minute. A schedule without `H` is returned as
is. Pass (dict "root" $ "schedule" "H 3 * * *").
*/}}
{{- define "hermes-agent.spreadSchedule" -}}
{{- $h := include "hermes-agent.releaseHash" .root | int64 -}}
{{- $fields := regexSplit " +" (trim .schedule) -1 -}}
{{- if and (eq (len $fields) 5) (has "H" $fields) -}}
{{- $spread := list (mod $h 60) (mod (div $h 60) 24) "" "" (mod (div $h 1440) 7) -}}
{{- $out := list -}}
{{- range $i, $f := $fields -}}
{{- if and (eq $f "H") (ne (toString (index $spread $i)) "") -}}
{{- $out = append $out (toString (index $spread $i)) -}}
{{- else -}}
{{- $out = append $out $f -}}
{{- end -}}
{{- end -}}
{{- join " " $out -}}
{{- else -}}
{{- .schedule -}}
{{- end -}}
{{- end -}}

{{/* The backup CronJob's schedule: backup.schedule (`H` spread), else a minute of 03:00-03:59 spread by release. */}}
{{- define "hermes-agent.backupSchedule" -}}
{{- include "hermes-agent.spreadSchedule" (dict "root" . "schedule" (default "H 3 * * *" .Values.backup.schedule)) -}}
{{- end -}}

{{/*
The verify CronJob's schedule: backup.verify.schedule (`H` spread), else weekly at a minute
of 04:00-06:59 (after the nightly backup's hour) on a day of the week, both spread by release.
*/}}
{{- define "hermes-agent.verifySchedule" -}}
{{- with .Values.backup.verify.schedule -}}
{{- include "hermes-agent.spreadSchedule" (dict "root" $ "schedule" .) -}}
{{- else -}}
{{- $h := include "hermes-agent.releaseHash" . | int64 -}}
{{- printf "%d %d * * %d" (mod $h 60) (add 4 (mod (div $h 60) 3)) (mod (div $h 1440) 7) -}}
{{- end -}}
{{- end -}}

{{- define "hermes-agent.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hermes-agent.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The backup pods' own ServiceAccount (CronJob, verify, pre-upgrade): never the agent pod's. */}}
{{- define "hermes-agent.backupServiceAccountName" -}}
{{- $sa := .Values.backup.serviceAccount -}}
{{- if $sa.create -}}
{{- default (include "hermes-agent.componentName" (dict "root" . "suffix" "backup")) $sa.name -}}
{{- else -}}
{{- default "default" $sa.name -}}
{{- end -}}
{{- end -}}

{{/*
The pre-upgrade hook's ServiceAccount: a hook of its own (job-pre-upgrade-backup.yaml) when the
chart makes the backup one, since hooks run before the release's other objects are applied
(an upgrade from a version without the backup ServiceAccount would wait for it until the
deadline); else backup.serviceAccount.name. vault.backupRole binds both names.
*/}}
{{- define "hermes-agent.preUpgradeServiceAccountName" -}}
{{- if .Values.backup.serviceAccount.create -}}
{{- include "hermes-agent.componentName" (dict "root" . "suffix" "pre-upgrade") -}}
{{- else -}}
{{- include "hermes-agent.backupServiceAccountName" . -}}
{{- end -}}
{{- end -}}

{{/* "true" when backups run in pods of their own (CronJob, verify, pre-upgrade hook). */}}
{{- define "hermes-agent.backupPods" -}}
{{- $b := .Values.backup -}}
{{- if and $b.enabled (eq $b.mode "cronjob") .Values.persistence.enabled -}}
true
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
{{- default (include "hermes-agent.componentName" (dict "root" . "suffix" "data")) .Values.persistence.existingClaim -}}
{{- end -}}

{{- define "hermes-agent.backupClaimName" -}}
{{- default (include "hermes-agent.componentName" (dict "root" . "suffix" "backup")) .Values.backup.target.pvc.existingClaim -}}
{{- end -}}

{{- define "hermes-agent.apiSecretName" -}}
{{- default (include "hermes-agent.componentName" (dict "root" . "suffix" "api")) .Values.apiServer.existingSecret -}}
{{- end -}}

{{/*
The containers that get one vault.secrets item, as a JSON array: its `for`, else a default by
variable name: AWS_* (the S3 keys) go to the backup, restore and replication containers,
RESTIC_PASSWORD to the backup and restore containers (replication never needs it), anything
else to the agent. Each container reads only its own in-memory file (docs/vault.md), so the
agent's shell never holds the keys that could delete the backups. Pass the item.
*/}}
{{- define "hermes-agent.vaultSecretConsumers" -}}
{{- if hasKey . "for" -}}
{{- index . "for" | toJson -}}
{{- else if hasPrefix "AWS_" .env -}}
["backup","restore","replicate"]
{{- else if eq .env "RESTIC_PASSWORD" -}}
["backup","restore"]
{{- else -}}
["agent"]
{{- end -}}
{{- end -}}

{{/* The variables Vault renders for one container, comma-joined ("" without Vault); pass (dict "root" $ "consumer" "agent"). */}}
{{- define "hermes-agent.vaultEnvsFor" -}}
{{- $names := list -}}
{{- if .root.Values.vault.enabled -}}
{{- range .root.Values.vault.secrets -}}
{{- if has $.consumer (include "hermes-agent.vaultSecretConsumers" . | fromJsonArray) -}}
{{- $names = append $names .env -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- join "," $names -}}
{{- end -}}

{{/*
Of the containers in .consumers (those a pod runs), the ones Vault renders at least one
variable for, as a JSON array: each gets its own in-memory volume and env file; the pod gets
the vault-render init container only when this is not empty. Pass (dict "root" $ "consumers" $list).
*/}}
{{- define "hermes-agent.vaultConsumersIn" -}}
{{- $active := list -}}
{{- range .consumers -}}
{{- if include "hermes-agent.vaultEnvsFor" (dict "root" $.root "consumer" .) -}}
{{- $active = append $active . -}}
{{- end -}}
{{- end -}}
{{- $active | toJson -}}
{{- end -}}

{{/* The containers of the agent pod that can read secrets, as a JSON array: agent, restore, replicate, backup (sidecar mode). */}}
{{- define "hermes-agent.agentPodConsumers" -}}
{{- $b := .Values.backup -}}
{{- $list := list "agent" -}}
{{- if .Values.restore.fromSnapshot }}{{ $list = append $list "restore" }}{{ end -}}
{{- if and $b.enabled $b.continuous.enabled }}{{ $list = append $list "replicate" }}{{ end -}}
{{- if and $b.enabled (eq $b.mode "sidecar") }}{{ $list = append $list "backup" }}{{ end -}}
{{- $list | toJson -}}
{{- end -}}

{{/*
"true" when a Vault secret supplies the env var named .env (to the container .for when given);
pass (dict "root" $ "env" "NAME") or (dict "root" $ "env" "NAME" "for" "agent").
*/}}
{{- define "hermes-agent.vaultProvides" -}}
{{- $found := false -}}
{{- if .root.Values.vault.enabled -}}
{{- range .root.Values.vault.secrets -}}
{{- if and (eq .env $.env) (or (not $.for) (has $.for (include "hermes-agent.vaultSecretConsumers" . | fromJsonArray))) -}}{{- $found = true -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- ternary "true" "" $found -}}
{{- end -}}

{{/* "true" when the chart's API key Secret is used (no existingSecret, no Vault-provided key for the agent). */}}
{{- define "hermes-agent.createApiSecret" -}}
{{- if and (not .Values.apiServer.existingSecret) (not (include "hermes-agent.vaultProvides" (dict "root" . "env" "API_SERVER_KEY" "for" "agent"))) -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when the agent reads its key from a Secret (as a file, HERMES_RUNTIME_API_KEY_FILE), not from Vault. */}}
{{- define "hermes-agent.apiKeyFromSecret" -}}
{{- if not (include "hermes-agent.vaultProvides" (dict "root" . "env" "API_SERVER_KEY" "for" "agent")) -}}
true
{{- end -}}
{{- end -}}

{{/*
Secrets made once in the cluster by the secrets Job (templates/secrets-job.yaml), never by a
render: a generated value in the manifests would change with every `helm template` (Argo CD)
and replace the key or the restic password on each sync. A JSON list of "name/key".
*/}}
{{- define "hermes-agent.generatedSecrets" -}}
{{- $wanted := list -}}
{{- if and (include "hermes-agent.createApiSecret" .) (not .Values.apiServer.key) -}}
{{- $wanted = append $wanted (printf "%s/%s" (include "hermes-agent.apiSecretName" .) .Values.apiServer.existingSecretKey) -}}
{{- end -}}
{{- if include "hermes-agent.generateBackupPassword" . -}}
{{- $wanted = append $wanted (printf "%s/RESTIC_PASSWORD" (include "hermes-agent.backupPasswordSecret" .)) -}}
{{- end -}}
{{- $wanted | toJson -}}
{{- end -}}

{{/* "true" when the restic password is generated in the cluster (backups or a restore, no existingSecret, not from Vault). */}}
{{- define "hermes-agent.generateBackupPassword" -}}
{{- $b := .Values.backup -}}
{{- if and (or $b.enabled .Values.restore.fromSnapshot) (not $b.repository.existingSecret) (not (include "hermes-agent.backupPasswordFromVault" .)) -}}
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
{{- default (include "hermes-agent.componentName" (dict "root" . "suffix" "backup-password")) .Values.backup.repository.existingSecret -}}
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

{{/*
Each role's own container security context values (its UID): the agent's, git-sync's, the Vault
containers', replicate's, the backup containers', restore's and plugin-deps', as a JSON object with the value
path that sets it. Pass the root context.
*/}}
{{- define "hermes-agent.roleContexts" -}}
{{- $v := .Values -}}
{{- dict
  "agent" (dict "path" "agent.containerSecurityContext" "ctx" ($v.agent.containerSecurityContext | default dict))
  "gitSync" (dict "path" "gitSync.containerSecurityContext" "ctx" ($v.gitSync.containerSecurityContext | default dict))
  "vault" (dict "path" "vault.containerSecurityContext" "ctx" ($v.vault.containerSecurityContext | default dict))
  "replicate" (dict "path" "backup.continuous.containerSecurityContext" "ctx" ($v.backup.continuous.containerSecurityContext | default dict))
  "backup" (dict "path" "backup.containerSecurityContext" "ctx" ($v.backup.containerSecurityContext | default dict))
  "restore" (dict "path" "restore.containerSecurityContext" "ctx" ($v.restore.containerSecurityContext | default dict))
  "pluginDeps" (dict "path" "pluginPackages.containerSecurityContext" "ctx" ($v.pluginPackages.containerSecurityContext | default dict))
  | toJson -}}
{{- end -}}

{{/*
The UID a role's containers run as: its own runAsUser, else allPods.containerSecurityContext's,
else the pod's (allPods.podSecurityContext). Pass (dict "root" $ "role" "backup").
*/}}
{{- define "hermes-agent.roleUid" -}}
{{- $own := get (get (include "hermes-agent.roleContexts" .root | fromJson) .role) "ctx" -}}
{{- $v := .root.Values.allPods -}}
{{- coalesce $own.runAsUser $v.containerSecurityContext.runAsUser $v.podSecurityContext.runAsUser | toString -}}
{{- end -}}

{{/*
The security context of one role's containers (docs/security.md: one UID per role): the
shared restricted one with the role's own values over it. Pass (dict "root" $ "role" "agent").
*/}}
{{- define "hermes-agent.roleSecurityContext" -}}
{{- $own := get (get (include "hermes-agent.roleContexts" .root | fromJson) .role) "ctx" -}}
{{- include "hermes-agent.containerSecurityContext" (dict "root" .root "override" $own) -}}
{{- end -}}

{{/* Security context of a container: the shared restricted one, with optional overrides. */}}
{{- define "hermes-agent.containerSecurityContext" -}}
{{- $ctx := deepCopy .root.Values.allPods.containerSecurityContext -}}
{{- with .override }}{{- $ctx = mergeOverwrite $ctx (deepCopy .) -}}{{- end }}
{{- if include "hermes-agent.platformUids" .root }}{{- $ctx = omit $ctx "runAsUser" "runAsGroup" "seLinuxOptions" -}}{{- end }}
{{- toYaml $ctx -}}
{{- end -}}

{{/*
NetworkPolicy helpers (templates/networkpolicy.yaml, docs/chart.md "NetworkPolicy").

The target of a URL as JSON {"host": ..., "port": ...}: the port written in the URL, else the
scheme's (http 80, https 443, git 9418, ssh 22); `git@host:path` is SSH. Pass the URL.
*/}}
{{- define "hermes-agent.npTarget" -}}
{{- $host := "" -}}
{{- $port := 0 -}}
{{- if hasPrefix "git@" . -}}
{{- $host = regexReplaceAll "^git@([^:/]+).*$" . "${1}" -}}
{{- $port = 22 -}}
{{- else -}}
{{- $u := urlParse . -}}
{{- $host = $u.hostname -}}
{{- $rest := trimPrefix (ternary (printf "[%s]" $host) $host (contains ":" $host)) $u.host -}}
{{- if hasPrefix ":" $rest -}}
{{- $port = trimPrefix ":" $rest | int -}}
{{- else -}}
{{- $port = get (dict "http" 80 "https" 443 "git" 9418 "ssh" 22) $u.scheme | default 0 | int -}}
{{- end -}}
{{- end -}}
{{- dict "host" $host "port" $port | toJson -}}
{{- end -}}

{{/*
TCP ports of a list of URLs (as npTarget reads them) plus extra ports, sorted and unique, as a
JSON array. Pass (dict "urls" $list "extra" $ints).
*/}}
{{- define "hermes-agent.egressPorts" -}}
{{- $ports := list -}}
{{- range .urls -}}
{{- $t := include "hermes-agent.npTarget" . | fromJson -}}
{{- if $t.port }}{{ $ports = append $ports (int $t.port) }}{{ end -}}
{{- end -}}
{{- range .extra }}{{ $ports = append $ports (int .) }}{{ end -}}
{{- $ports | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/*
CIDRs no chart-made "public" peer may reach, as a JSON array: the private and shared ranges
(where the cluster's nodes, pods, Services and the API server live on most clusters), the
link-local range (cloud metadata at 169.254.169.254), networkPolicy.clusterCidrs and
networkPolicy.kubeApi.cidrs. Pass the root context.
*/}}
{{- define "hermes-agent.npPrivateCidrs" -}}
{{- $np := .Values.networkPolicy -}}
{{- $cidrs := list "10.0.0.0/8" "172.16.0.0/12" "192.168.0.0/16" "100.64.0.0/10" "169.254.0.0/16" -}}
{{- concat $cidrs ($np.clusterCidrs | default list) ($np.kubeApi.cidrs | default list) | uniq | toJson -}}
{{- end -}}

{{/*
The API server's addresses as /32 and /128 CIDRs, from the `kubernetes` EndpointSlice of the
`default` namespace (the API server keeps it), as a JSON list; `[]` when
networkPolicy.kubeApi.discover is off or there is no cluster to ask (`helm template`). Helm's
`lookup` fails the render when the installer may not read it: the value's description says so.
Pass the root context.
*/}}
{{- define "hermes-agent.discoveredApiCidrs" -}}
{{- $out := list -}}
{{- if .Values.networkPolicy.kubeApi.discover -}}
{{- $slice := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "kubernetes" | default dict -}}
{{- range $slice.endpoints | default list -}}
{{- range .addresses | default list -}}
{{- $out = append $out (printf "%s/%s" . (ternary "128" "32" (contains ":" .))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $out | uniq | toJson -}}
{{- end -}}

{{/* The API server's endpoint ports from the same EndpointSlice, as a JSON list. */}}
{{- define "hermes-agent.discoveredApiPorts" -}}
{{- $out := list -}}
{{- if .Values.networkPolicy.kubeApi.discover -}}
{{- $slice := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "kubernetes" | default dict -}}
{{- range $slice.ports | default list -}}
{{- $out = append $out (int .port) -}}
{{- end -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{/* The peer "any public IPv4 address": 0.0.0.0/0 except npPrivateCidrs. Pass the root context. */}}
{{- define "hermes-agent.npPublicPeer" -}}
{{- dict "ipBlock" (dict "cidr" "0.0.0.0/0" "except" (include "hermes-agent.npPrivateCidrs" . | fromJsonArray)) | toJson -}}
{{- end -}}

{{/*
"true" when IPv4 CIDR .inner lies strictly inside IPv4 CIDR .outer (an `except` entry must), else
empty; IPv6 never. Pass (dict "inner" "10.1.0.0/16" "outer" "10.0.0.0/8").
*/}}
{{- define "hermes-agent.npInside" -}}
{{- $v4 := "^([0-9]+)\\.([0-9]+)\\.([0-9]+)\\.([0-9]+)/([0-9]+)$" -}}
{{- if and (regexMatch $v4 .inner) (regexMatch $v4 .outer) -}}
{{- $in := regexFindAll "[0-9]+" .inner -1 -}}
{{- $out := regexFindAll "[0-9]+" .outer -1 -}}
{{- $inAddr := add (mul (index $in 0 | int64) 16777216) (mul (index $in 1 | int64) 65536) (mul (index $in 2 | int64) 256) (index $in 3 | int64) -}}
{{- $outAddr := add (mul (index $out 0 | int64) 16777216) (mul (index $out 1 | int64) 65536) (mul (index $out 2 | int64) 256) (index $out 3 | int64) -}}
{{- $block := 1 -}}
{{- range until (sub 32 (index $out 4 | int) | int) }}{{ $block = mul $block 2 }}{{ end -}}
{{- if and (gt (index $in 4 | int) (index $out 4 | int)) (eq (div $inAddr $block) (div $outAddr $block)) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Peers written in values, as a JSON array. Each ipBlock that contains the metadata range
169.254.0.0/16 or an address of networkPolicy.kubeApi.cidrs gets it added to its `except`, and
an ipBlock 0.0.0.0/0 networkPolicy.clusterCidrs too: only kubeApi.allow opens the API server.
Pass (dict "root" $ "peers" $list).
*/}}
{{- define "hermes-agent.npUserPeers" -}}
{{- $np := .root.Values.networkPolicy -}}
{{- $never := concat (list "169.254.0.0/16") ($np.kubeApi.cidrs | default list) -}}
{{- $out := list -}}
{{- range .peers -}}
{{- $peer := deepCopy . -}}
{{- with $peer.ipBlock -}}
{{- $cidr := toString .cidr -}}
{{- $excepts := .except | default list -}}
{{- $candidates := $never -}}
{{- if eq $cidr "0.0.0.0/0" }}{{ $candidates = concat $candidates ($np.clusterCidrs | default list) }}{{ end -}}
{{- range $candidates -}}
{{- if include "hermes-agent.npInside" (dict "inner" . "outer" $cidr) }}{{ $excepts = append $excepts . }}{{ end -}}
{{- end -}}
{{- with $excepts }}{{ $_ := set $peer.ipBlock "except" (uniq .) }}{{ end -}}
{{- end -}}
{{- $out = append $out $peer -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}

{{/*
The peer an endpoint's host stands for, as JSON, when networkPolicy.egress does not name one:
an IP address: that address; a Service of the cluster (`name`: the release's namespace,
`name.namespace.svc[.domain]`: that namespace): every pod of that namespace; any other name:
npPublicPeer. Pass (dict "root" $ "host" $host).
*/}}
{{- define "hermes-agent.npHostPeer" -}}
{{- $host := .host -}}
{{- $labels := splitList "." $host -}}
{{- if regexMatch "^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+$" $host -}}
{{- dict "ipBlock" (dict "cidr" (printf "%s/32" $host)) | toJson -}}
{{- else if contains ":" $host -}}
{{- dict "ipBlock" (dict "cidr" (printf "%s/128" $host)) | toJson -}}
{{- else if eq (len $labels) 1 -}}
{{- dict "podSelector" (dict) | toJson -}}
{{- else if and (ge (len $labels) 3) (eq (index $labels 2) "svc") -}}
{{- dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" (index $labels 1))) | toJson -}}
{{- else -}}
{{- include "hermes-agent.npPublicPeer" .root -}}
{{- end -}}
{{- end -}}

{{/*
Egress rules to the endpoints of a pod: pass (dict "root" $ "endpoints" $map), $map from an
endpoint kind (llm, git, s3, vault, index) to its URLs. Each kind goes to networkPolicy.egress.<kind>
when set, else to the peer of each URL's host (npHostPeer); one rule per set of peers, with
the TCP ports of the URLs that go there. Then networkPolicy.extraEgressPorts (to public
addresses) and extraEgress.
*/}}
{{- define "hermes-agent.egressRules" -}}
{{- $root := .root -}}
{{- $np := $root.Values.networkPolicy -}}
{{- $byPeers := dict -}}
{{- range $kind, $urls := .endpoints -}}
{{- $given := get ($np.egress | default dict) $kind | default list -}}
{{- range $urls -}}
{{- $t := include "hermes-agent.npTarget" . | fromJson -}}
{{- if $t.port -}}
{{- $peers := "" -}}
{{- if $given -}}
{{- $peers = include "hermes-agent.npUserPeers" (dict "root" $root "peers" $given) -}}
{{- else -}}
{{- $peers = list (include "hermes-agent.npHostPeer" (dict "root" $root "host" $t.host) | fromJson) | toJson -}}
{{- end -}}
{{- $_ := set $byPeers $peers (append (get $byPeers $peers | default list) (int $t.port)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $peers := keys $byPeers | sortAlpha }}
- ports:
    {{- range get $byPeers $peers | uniq | sortAlpha }}
    - port: {{ int . }}
      protocol: TCP
    {{- end }}
  to:
    {{- fromJsonArray $peers | toYaml | nindent 4 }}
{{- end }}
{{- with $np.extraEgressPorts }}
- ports:
    {{- range . }}
    - port: {{ int .port }}
      protocol: {{ .protocol | default "TCP" }}
    {{- end }}
  to:
    - {{ include "hermes-agent.npPublicPeer" $root | fromJson | toYaml | nindent 6 | trim }}
{{- end }}
{{- range $np.extraEgress }}
{{- $rule := deepCopy . }}
{{- with $rule.to }}{{ $_ := set $rule "to" (include "hermes-agent.npUserPeers" (dict "root" $root "peers" .) | fromJsonArray) }}{{ end }}
- {{ toYaml $rule | nindent 2 | trim }}
{{- end }}
{{- end -}}

{{/* Egress to the cluster DNS only (networkPolicy.dns.to), UDP and TCP 53. Pass the root context. */}}
{{- define "hermes-agent.npDnsRule" -}}
- ports:
    - port: 53
      protocol: UDP
    - port: 53
      protocol: TCP
  to:
    {{- include "hermes-agent.npUserPeers" (dict "root" . "peers" .Values.networkPolicy.dns.to) | fromJsonArray | toYaml | nindent 4 }}
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

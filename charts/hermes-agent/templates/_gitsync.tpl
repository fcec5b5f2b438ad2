{{/*
One git-sync v4 container per plugin, modeled on the Apache Airflow chart's git-sync container.
Pass (dict "root" $ "plugin" $p "index" $i "mode" "native"|"init"|"sidecar").
  native:  init container with restartPolicy Always + startup probe (first sync done before the agent starts)
  init:    one-shot init container (--one-time) for clusters without native sidecars
  sidecar: regular container that keeps syncing (paired with "init")
It sees only its own tree: its plugin's own emptyDir (`plugin-<name>`, sized from the plugin's
maxSizeMiB: hermes-agent.gitSyncSizeLimit), mounted at the same path the agent reads it from
(/opt/data/.git-sync/<name>, read-only there), never the data volume with the conversations
and databases. The emptyDir's root is world-writable and setgid to fsGroup, so git-sync (UID
65533) can write it; the worktree paths git writes are the same in both containers.
Submodules are off unless the plugin asks (`submodules: true`): upstream's default clones
every submodule a repository names, recursively, which its size cap never saw coming.
*/}}
{{- define "hermes-agent.gitSyncContainer" -}}
{{- $root := .root -}}
{{- $p := .plugin -}}
{{- $g := $root.Values.gitSync -}}
{{- $port := add $g.httpPort .index -}}
{{- $auth := default (dict) $p.auth -}}
- name: {{ printf "git-sync-%s" ($p.name | replace "_" "-") | trunc 63 | trimSuffix "-" }}{{ if eq .mode "init" }}-init{{ end }}
  image: {{ include "hermes-agent.gitSyncImage" $root }}
  imagePullPolicy: {{ $g.image.pullPolicy }}
  {{- if eq .mode "native" }}
  restartPolicy: Always
  {{- end }}
  env:
    - name: GITSYNC_REPO
      value: {{ $p.repo | quote }}
    - name: GITSYNC_REF
      value: {{ default "HEAD" $p.ref | quote }}
    - name: GITSYNC_DEPTH
      value: {{ ternary $p.depth $g.depth (hasKey $p "depth") | toString | quote }}
    - name: GITSYNC_PERIOD
      value: {{ default $g.period $p.period | quote }}
    - name: GITSYNC_ROOT
      value: {{ printf "%s/%s" (include "hermes-agent.paths.gitSync" $root) $p.name | quote }}
    - name: GITSYNC_LINK
      value: current
    - name: GITSYNC_MAX_FAILURES
      value: {{ $g.maxFailures | toString | quote }}
    - name: GITSYNC_GROUP_WRITE
      value: "true"
    - name: GITSYNC_SUBMODULES
      value: {{ ternary "recursive" "off" (eq (toString $p.submodules) "true") | quote }}
    {{- /* Its root is a directory the kubelet made (the subPath), owned by root: git refuses
    it as "dubious ownership" unless it is named safe. git-sync v4.7 trusts every directory
    itself (safe.directory '*'); its main branch no longer does, so name the one root here. */}}
    - name: GITSYNC_GIT_CONFIG
      value: {{ printf "safe.directory:%s/.git-sync/%s" (include "hermes-agent.paths.data" $root) $p.name | quote }}
    - name: HOME
      value: /tmp
    {{- if eq .mode "init" }}
    - name: GITSYNC_ONE_TIME
      value: "true"
    {{- else }}
    - name: GITSYNC_HTTP_BIND
      value: {{ printf ":%d" (int $port) | quote }}
    - name: GITSYNC_HTTP_METRICS
      value: "true"
    {{- end }}
    {{- if $auth.existingSecret }}
    - name: GITSYNC_USERNAME
      valueFrom:
        secretKeyRef:
          name: {{ $auth.existingSecret }}
          key: GITSYNC_USERNAME
    - name: GITSYNC_PASSWORD
      valueFrom:
        secretKeyRef:
          name: {{ $auth.existingSecret }}
          key: GITSYNC_PASSWORD
    {{- end }}
    {{- if $auth.sshKeySecret }}
    - name: GITSYNC_SSH_KEY_FILE
      value: /etc/git-secret/ssh
    - name: GITSYNC_SSH_KNOWN_HOSTS
      value: "true"
    - name: GITSYNC_SSH_KNOWN_HOSTS_FILE
      value: /etc/git-known-hosts/known_hosts
    {{- end }}
    {{- with $g.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if ne .mode "init" }}
  ports:
    - name: {{ printf "gs-%d" (int .index) }}
      containerPort: {{ $port }}
      protocol: TCP
  {{- end }}
  {{- if eq .mode "native" }}
  startupProbe:
    httpGet:
      path: /
      port: {{ $port }}
    {{- toYaml $g.startupProbe | nindent 4 }}
  {{- end }}
  {{- if ne .mode "init" }}
  livenessProbe:
    httpGet:
      path: /
      port: {{ $port }}
    {{- toYaml $g.livenessProbe | nindent 4 }}
  {{- end }}
  securityContext:
    {{- include "hermes-agent.roleSecurityContext" (dict "root" $root "role" "gitSync") | nindent 4 }}
  resources:
    {{- toYaml $g.resources | nindent 4 }}
  volumeMounts:
    - name: {{ include "hermes-agent.gitSyncVolumeName" $p }}
      mountPath: {{ printf "%s/%s" (include "hermes-agent.paths.gitSync" $root) $p.name }}
    - name: git-sync-home
      mountPath: /tmp
      subPath: {{ $p.name }}
    {{- if $auth.sshKeySecret }}
    - name: {{ printf "git-ssh-%d" (int .index) }}
      mountPath: /etc/git-secret
      readOnly: true
    - name: seed
      mountPath: /etc/git-known-hosts/known_hosts
      subPath: {{ printf "known_hosts-%s" $p.name }}
      readOnly: true
    {{- end }}
{{- end -}}

{{/* The emptyDir of one plugin's tree; pass the plugin. */}}
{{- define "hermes-agent.gitSyncVolumeName" -}}
{{- printf "plugin-%s" (.name | replace "_" "-") -}}
{{- end -}}

{{/*
The sizeLimit of one plugin's emptyDir, from its maxSizeMiB (default 100, as the runtime's):
4 x maxSizeMiB + 64 MiB. Two worktrees (git-sync checks the new commit out beside the one
`current` names, and removes the old one only after the swap) and git's objects of two commits
(the fetched commit's next to the previous one's, until git-sync's `git gc` after the sync drops
them; packed objects are at most the files' size, usually far less), plus 64 MiB for git's
index, logs and temporary pack files. Per plugin, so one large repository cannot take the
space of the others. The kubelet enforces a sizeLimit by evicting the pod: a commit far over
maxSizeMiB (which the linker refuses anyway) can still get there, as can a full history
(depth 0) or submodules, which count towards none of the above: raise maxSizeMiB for those.
Pass the plugin.
*/}}
{{- define "hermes-agent.gitSyncSizeLimit" -}}
{{- $max := ternary (int .maxSizeMiB) 100 (hasKey . "maxSizeMiB") -}}
{{- printf "%dMi" (add (mul 4 $max) 64) -}}
{{- end -}}

{{/* The agent's read-only mount of each plugin's tree at /opt/data/.git-sync/<name>. */}}
{{- define "hermes-agent.gitSyncAgentMounts" -}}
{{- range .Values.plugins }}
- name: {{ include "hermes-agent.gitSyncVolumeName" . }}
  mountPath: {{ printf "%s/%s" (include "hermes-agent.paths.gitSync" $) .name }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* Volumes the git-sync containers need beyond the shared ones: one tree per plugin. */}}
{{- define "hermes-agent.gitSyncVolumes" -}}
{{- if .Values.plugins }}
{{- range .Values.plugins }}
- name: {{ include "hermes-agent.gitSyncVolumeName" . }}
  emptyDir:
    sizeLimit: {{ include "hermes-agent.gitSyncSizeLimit" . }}
{{- end }}
- name: git-sync-home
  emptyDir:
    sizeLimit: 64Mi
{{- range $i, $p := .Values.plugins }}
{{- $auth := default (dict) $p.auth }}
{{- if $auth.sshKeySecret }}
- name: {{ printf "git-ssh-%d" (int $i) }}
  secret:
    secretName: {{ $auth.sshKeySecret }}
    defaultMode: 0440
    items:
      - key: ssh
        path: ssh
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
One git-sync v4 container per plugin, modeled on the Apache Airflow chart's git-sync container.
Pass (dict "root" $ "plugin" $p "index" $i "mode" "native"|"init"|"sidecar").
  native:  init container with restartPolicy Always + startup probe (first sync done before the agent starts)
  init:    one-shot init container (--one-time) for clusters without native sidecars
  sidecar: regular container that keeps syncing (paired with "init")
It sees only its own tree: the subPath <name> of the `git-sync` emptyDir, mounted at the
same path the agent reads it from (/opt/data/.git-sync/<name>, read-only there), never the
data volume with the conversations and databases. The kubelet creates the subPath directory
with the mode of the emptyDir's root (world-writable, setgid to fsGroup), so git-sync (UID
65533) can write it; the worktree paths git writes are the same in both containers.
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
    {{- include "hermes-agent.containerSecurityContext" (dict "root" $root "override" (dict "runAsUser" 65533 "runAsGroup" 65533)) | nindent 4 }}
  resources:
    {{- toYaml $g.resources | nindent 4 }}
  volumeMounts:
    - name: git-sync
      mountPath: {{ printf "%s/%s" (include "hermes-agent.paths.gitSync" $root) $p.name }}
      subPath: {{ $p.name }}
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

{{/* Volumes the git-sync containers need beyond the shared ones. */}}
{{- define "hermes-agent.gitSyncVolumes" -}}
{{- if .Values.plugins }}
- name: git-sync
  emptyDir:
    sizeLimit: {{ .Values.gitSync.sizeLimit }}
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

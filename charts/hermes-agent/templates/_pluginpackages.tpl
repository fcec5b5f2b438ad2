{{/*
The plugin-deps container (pluginPackages): `hermes-runtime plugins install-deps --watch` in
the agent image, installing each plugin's hash-pinned requirements.txt into
/opt/data/.plugin-packages/<name>/<sha256> (docs/plugins.md, "Plugins with dependencies").
The requirements are untrusted input (whoever can push to a plugin writes them), so the
installer is not the agent: a UID of its own, no credential of the agent's (no LLM or API key,
no Vault file, no S3 keys, no git credentials, no ServiceAccount token), only the index URL,
which may hold the index's own credentials (pluginPackages.existingSecret) and then reaches
this container alone. It sees each plugin's tree read-only, the agent's links in
/opt/data/plugins read-only (which target a running gateway still imports from, so pruning
keeps it) and writes the data volume's `.plugin-packages` folder only; the agent mounts that
folder read-only, so its shell cannot swap a package the gateway imports.
A native sidecar after the git-sync ones (the trees are synced before its first run), or a
plain container where native sidecars are off. No startup probe: the agent's linker waits for a
plugin's packages and relinks once they are installed. Pass (dict "root" $ "native" bool).
*/}}
{{- define "hermes-agent.pluginDepsContainer" -}}
{{- $root := .root -}}
{{- $pp := $root.Values.pluginPackages -}}
- name: plugin-deps
  image: {{ include "hermes-agent.agentImage" $root }}
  imagePullPolicy: {{ $root.Values.image.pullPolicy }}
  {{- if .native }}
  restartPolicy: Always
  {{- end }}
  {{- /* args only: the image's ENTRYPOINT (catatonit, PID 1, reaps pip's children) stays. */}}
  args:
    - hermes-runtime
    - plugins
    - install-deps
    - --watch
    - --interval
    - {{ $pp.interval | quote }}
    - --max-size-mib
    - {{ $pp.maxSizeMiB | int | quote }}
  env:
    - name: HOME
      value: /tmp
    {{- include "hermes-agent.commonEnv" $root | nindent 4 }}
    - name: HERMES_RUNTIME_PLUGIN_SPEC
      value: /etc/hermes-runtime/plugins.yaml
    - name: HERMES_RUNTIME_PLUGIN_INDEX_URL
      {{- if $pp.existingSecret }}
      valueFrom:
        secretKeyRef:
          name: {{ $pp.existingSecret }}
          key: {{ $pp.existingSecretKey }}
      {{- else }}
      value: {{ $pp.indexUrl | quote }}
      {{- end }}
    {{- if $pp.caSecret }}
    - name: HERMES_RUNTIME_PLUGIN_INDEX_CA
      value: {{ include "hermes-agent.paths.pluginIndexCa" $root }}
    {{- end }}
  securityContext:
    {{- include "hermes-agent.roleSecurityContext" (dict "root" $root "role" "pluginDeps") | nindent 4 }}
  resources:
    {{- toYaml $pp.resources | nindent 4 }}
  volumeMounts:
    - name: tmp-plugin-deps
      mountPath: /tmp
    - name: data
      mountPath: {{ include "hermes-agent.paths.pluginPackages" $root }}
      subPath: {{ base (include "hermes-agent.paths.pluginPackages" $root) }}
    - name: data
      mountPath: {{ printf "%s/plugins" (include "hermes-agent.paths.data" $root) }}
      subPath: plugins
      readOnly: true
    {{- include "hermes-agent.gitSyncAgentMounts" $root | nindent 4 }}
    {{- /* The spec alone, not the whole seed ConfigMap (config.yaml, SOUL.md). A subPath mount
    is not updated in place, which costs nothing here: a new spec is a new pod (the
    Deployment's checksum/config annotation). */}}
    - name: seed
      mountPath: /etc/hermes-runtime/plugins.yaml
      subPath: plugins.yaml
      readOnly: true
    {{- if $pp.caSecret }}
    - name: plugin-index-ca
      mountPath: {{ dir (include "hermes-agent.paths.pluginIndexCa" $root) }}
      readOnly: true
    {{- end }}
{{- end -}}

{{/* The index's private CA (pluginPackages.caSecret), for the plugin-deps container alone. */}}
{{- define "hermes-agent.pluginIndexCaVolume" -}}
- name: plugin-index-ca
  secret:
    secretName: {{ .Values.pluginPackages.caSecret }}
    defaultMode: 0444
    items:
      - key: ca.crt
        path: ca.crt
{{- end -}}

{{- define "hermes-agent.paths.pluginIndexCa" -}}/etc/hermes-runtime-index-ca/ca.crt{{- end -}}

{{/* Whether the agent pod runs plugin-deps: pluginPackages on, and plugins to install for. */}}
{{- define "hermes-agent.pluginDeps" -}}
{{- if and .Values.pluginPackages.enabled .Values.plugins -}}true{{- end -}}
{{- end -}}

{{/* The agent's read-only view of the installed packages (over its writable data volume). */}}
{{- define "hermes-agent.pluginPackagesAgentMount" -}}
{{- if include "hermes-agent.pluginDeps" . }}
- name: data
  mountPath: {{ include "hermes-agent.paths.pluginPackages" . }}
  subPath: {{ base (include "hermes-agent.paths.pluginPackages" .) }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "hermes-agent.paths.pluginPackages" -}}/opt/data/.plugin-packages{{- end -}}

{{- /*
Rules of templates/validate.yaml kept in defines of their own. Each returns its errors one a
line, each starting with the field at fault and ending with what to write instead; validate.yaml
reports them with the others, all at once. values.schema.json checks only the types of these
values, so that the message a person reads is one of these, not a regular expression.
*/ -}}

{{- /*
The value of a Kubernetes quantity as a float, "" when the text is not one. Kubernetes' own
form: a decimal number, then an optional suffix (m, k, M, G, T, P, E; Ki ... Ei) or exponent.
Pass the quantity (string or number).
*/ -}}
{{- define "hermes-agent.quantityValue" -}}
{{- $s := trimPrefix "+" (toString .) -}}
{{- if regexMatch "^([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$" $s -}}
{{- $num := regexFind "^([0-9]+(\\.[0-9]*)?|\\.[0-9]+)" $s -}}
{{- $suffix := trimPrefix $num $s -}}
{{- $scale := dict "" "1" "k" "1e3" "M" "1e6" "G" "1e9" "T" "1e12" "P" "1e15" "E" "1e18" "Ki" "1024" "Mi" "1048576" "Gi" "1073741824" "Ti" "1099511627776" "Pi" "1125899906842624" "Ei" "1152921504606846976" -}}
{{- if eq $suffix "m" -}}
{{- divf (float64 $num) 1000 -}}
{{- else if hasKey $scale $suffix -}}
{{- mulf (float64 $num) (float64 (get $scale $suffix)) -}}
{{- else -}}
{{- float64 $s -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /*
The message for a quantity Kubernetes cannot read. A size written as on a disk's label (2GB,
10 gb, 128 Mi) gets both ways to write it; anything else gets examples. Pass (dict "field"
"agent.resources.limits.memory" "value" "2GB" "examples" "512Mi or 2Gi").
*/ -}}
{{- define "hermes-agent.quantityError" -}}
{{- $s := toString .value -}}
{{- $label := "^\\s*[0-9]+(\\.[0-9]+)?\\s*[kKmMgGtTpPeE]i?[bB]?\\s*$" -}}
{{- if and (regexMatch $label $s) (not (hasSuffix ".cpu" .field)) -}}
{{- $num := regexReplaceAll "^\\s*([0-9.]+).*$" $s "${1}" -}}
{{- $unit := regexReplaceAll "^\\s*[0-9.]+\\s*([a-zA-Z]).*$" $s "${1}" | upper -}}
{{- $prefix := get (dict "K" "kilo" "M" "mega" "G" "giga" "T" "tera" "P" "peta" "E" "exa") $unit -}}
{{- $binary := get (dict "K" "kibi" "M" "mebi" "G" "gibi" "T" "tebi" "P" "pebi" "E" "exbi") $unit -}}
{{- printf "%s: %q is not a Kubernetes quantity (no B, no space); write %s%si (%sbytes, 1024-based) or %s%s (%sbytes, 1000-based)" .field $s $num $unit $binary $num (ternary "k" $unit (eq $unit "K")) $prefix -}}
{{- else -}}
{{- printf "%s: %q is not a Kubernetes quantity; write a number with an optional suffix, e.g. %s" .field $s .examples -}}
{{- end -}}
{{- end -}}

{{- /*
Every container's resources: each quantity readable, each request within its limit (Kubernetes
refuses the pod otherwise, at the apply or, for the hook and CronJob pods, hours later). And
every size of a volume. The list names every `resources` value of values.yaml: the chart tests
find them in values.schema.json and fail on one missing here.
*/ -}}
{{- define "hermes-agent.validate.quantities" -}}
{{- $v := .Values -}}
{{- $blocks := list (list "agent.resources" $v.agent.resources) (list "gitSync.resources" $v.gitSync.resources) (list "backup.resources" $v.backup.resources) (list "backup.continuous.resources" $v.backup.continuous.resources) (list "restore.resources" $v.restore.resources) (list "pluginPackages.resources" $v.pluginPackages.resources) (list "vault.resources" $v.vault.resources) (list "secretsJob.resources" $v.secretsJob.resources) (list "tests.resources" $v.tests.resources) -}}
{{- range $block := $blocks -}}
{{- $path := index $block 0 -}}
{{- $res := index $block 1 | default (dict) -}}
{{- $parsed := dict -}}
{{- range $kind := list "requests" "limits" -}}
{{- range $name, $q := get $res $kind | default (dict) -}}
{{- $field := printf "%s.%s.%s" $path $kind $name -}}
{{- $n := include "hermes-agent.quantityValue" $q -}}
{{- if $n -}}
{{- $_ := set $parsed $field $n -}}
{{- else -}}
{{- include "hermes-agent.quantityError" (dict "field" $field "value" $q "examples" "250m or 0.5 for CPU, 512Mi or 2Gi for memory") }}{{ "\n" }}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $limits := get $res "limits" | default (dict) -}}
{{- range $name, $q := get $res "requests" | default (dict) -}}
{{- $r := get $parsed (printf "%s.requests.%s" $path $name) -}}
{{- $l := get $parsed (printf "%s.limits.%s" $path $name) -}}
{{- if and $r $l (gt (float64 $r) (float64 $l)) -}}
{{- printf "%s.requests.%s: %v is above %s.limits.%s (%v), and Kubernetes refuses a container whose request exceeds its limit; lower the request or raise the limit\n" $path $name $q $path $name (get $limits $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $sizes := list (list "persistence.size" $v.persistence.size) (list "agent.tmpSizeLimit" $v.agent.tmpSizeLimit) (list "backup.target.pvc.size" $v.backup.target.pvc.size) (list "backup.scratch.size" $v.backup.scratch.size) -}}
{{- range $sizes -}}
{{- $value := index . 1 -}}
{{- if and (ne (toString $value) "") (not (regexMatch "^([0-9]+(\\.[0-9]+)?|\\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$" (toString $value))) -}}
{{- include "hermes-agent.quantityError" (dict "field" (index . 0) "value" $value "examples" "512Mi, 10Gi or 1Ti") }}{{ "\n" }}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /*
One source per secret: a value given both as a Secret and by Vault would be rendered twice,
and at run time the Vault file wins, so the Secret a person believes in goes silently unused
(and keeps its old key after they rotate it there). Each pair is refused, naming both.
*/ -}}
{{- define "hermes-agent.validate.secretSources" -}}
{{- $v := .Values -}}
{{- if $v.vault.enabled -}}
{{- $repo := $v.backup.repository -}}
{{- range $i, $s := $v.vault.secrets -}}
{{- $for := include "hermes-agent.vaultSecretConsumers" $s | fromJsonArray -}}
{{- $entry := printf "vault.secrets[%d].env (%s)" $i $s.env -}}
{{- $keep := printf "keep one source: delete %%s, or that vault.secrets entry" -}}
{{- if and (hasPrefix "AWS_" $s.env) $v.backup.target.s3.existingSecret (or (has "backup" $for) (has "restore" $for) (has "replicate" $for)) -}}
{{- printf "backup.target.s3.existingSecret: %q is set together with %s, which fills the S3 credentials of the same containers; the Vault file would win at run time and the Secret go unused: %s\n" $v.backup.target.s3.existingSecret $entry (printf $keep "backup.target.s3.existingSecret") -}}
{{- end -}}
{{- if and (eq $s.env "LLM_API_KEY") $v.llm.existingSecret (has "agent" $for) -}}
{{- printf "llm.existingSecret: %q is set together with %s, which fills the same provider key; the Vault file would win at run time and the Secret go unused: %s\n" $v.llm.existingSecret $entry (printf $keep "llm.existingSecret") -}}
{{- end -}}
{{- if and (eq $s.env "RESTIC_PASSWORD") $repo.existingSecret -}}
{{- printf "backup.repository.existingSecret: %q is set together with %s, which fills the same repository password; the Vault file would win at run time and the Secret go unused: %s\n" $repo.existingSecret $entry (printf $keep "backup.repository.existingSecret") -}}
{{- end -}}
{{- if and (eq $s.env "API_SERVER_KEY") (has "agent" $for) (or $v.apiServer.existingSecret $v.apiServer.key) -}}
{{- $field := ternary "apiServer.existingSecret" "apiServer.key" (not (empty $v.apiServer.existingSecret)) -}}
{{- printf "%s: set together with %s, which fills the same API key; the Vault file would win at run time and %s go unused: %s\n" $field $entry $field (printf $keep $field) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $v.backup.repository.fromVault $v.backup.repository.existingSecret -}}
{{- printf "backup.repository.existingSecret: %q is set together with backup.repository.fromVault: true, which takes the password from Vault instead; keep one source: delete backup.repository.existingSecret, or set fromVault: false\n" $v.backup.repository.existingSecret -}}
{{- end -}}
{{- end -}}

{{- /* A short API key is refused here, not by a schema pattern: the message says how to make one and never prints the key. */ -}}
{{- define "hermes-agent.validate.apiKey" -}}
{{- with .Values.apiServer.key -}}
{{- if lt (len .) 16 -}}
{{- printf "apiServer.key: %d characters, fewer than the 16 a key needs (a short key is guessed by anyone who reaches the API port); write at least 16 random characters (openssl rand -hex 32), use apiServer.existingSecret, or leave it empty for a key generated once in the cluster\n" (len .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /*
The entrance (ingress.*, httpRoute.*): host names as DNS names, paths from /, a Gateway to
attach to and its API in the cluster, and, with the NetworkPolicy on, the peers of the pods
that forward to the agent (without them the policy drops every request the entrance sends).
*/ -}}
{{- define "hermes-agent.validate.entrance" -}}
{{- $v := .Values -}}
{{- $hostPattern := "^(\\*\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$" -}}
{{- $hostFix := "write the name alone in lower case, e.g. hermes.example.com (no scheme, port or path)" -}}
{{- $np := $v.networkPolicy -}}
{{- $guarded := and $np.enabled (ne $np.ingress.api "any") -}}
{{- $in := $v.ingress -}}
{{- if $in.enabled -}}
{{- if not $in.hosts -}}
{{- print "ingress.hosts: empty with ingress.enabled, and an Ingress without a host answers for every host its controller serves; name the host clients use, e.g. [hermes.example.com]\n" -}}
{{- end -}}
{{- range $i, $h := $in.hosts -}}
{{- if not (regexMatch $hostPattern $h) }}{{ printf "ingress.hosts[%d]: %q is not a host name; %s\n" $i $h $hostFix }}{{ end -}}
{{- end -}}
{{- if not (hasPrefix "/" $in.path) -}}
{{- printf "ingress.path: %q does not start with /; write an absolute path, e.g. /\n" $in.path -}}
{{- end -}}
{{- range $i, $t := $in.tls -}}
{{- if not $t.secretName -}}
{{- printf "ingress.tls[%d].secretName: empty; name the Secret (type kubernetes.io/tls) that holds the certificate, e.g. the one cert-manager makes\n" $i -}}
{{- end -}}
{{- if not $t.hosts -}}
{{- printf "ingress.tls[%d].hosts: empty; list the hosts of ingress.hosts the certificate covers\n" $i -}}
{{- end -}}
{{- range $j, $h := $t.hosts -}}
{{- if not (has $h $in.hosts) -}}
{{- printf "ingress.tls[%d].hosts[%d]: %q is not one of ingress.hosts, so no rule of the Ingress serves it; add it to ingress.hosts or remove it here\n" $i $j $h -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $guarded (not $in.controllerFrom) -}}
{{- printf "ingress.controllerFrom: empty while networkPolicy.enabled, so the agent's NetworkPolicy would drop every request of the ingress controller (it lets in the API port only from networkPolicy.ingress.api=%s and apiFrom); name the controller's pods, e.g. [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ingress-nginx}}}], or set networkPolicy.ingress.api: any\n" $np.ingress.api -}}
{{- end -}}
{{- end -}}
{{- $r := $v.httpRoute -}}
{{- if $r.enabled -}}
{{- if not ($.Capabilities.APIVersions.Has "gateway.networking.k8s.io/v1/HTTPRoute") -}}
{{- print "httpRoute.enabled: the cluster has no gateway.networking.k8s.io/v1 HTTPRoute API; install the Gateway API CRDs (v1.0 or later) and a Gateway controller first (or pass --api-versions gateway.networking.k8s.io/v1/HTTPRoute to helm template), or set httpRoute.enabled=false\n" -}}
{{- end -}}
{{- if not $r.parentRefs -}}
{{- print "httpRoute.parentRefs: empty with httpRoute.enabled; name the Gateway the route attaches to, e.g. [{name: public, namespace: gateway-system, sectionName: https}]\n" -}}
{{- end -}}
{{- range $i, $h := $r.hostnames -}}
{{- if not (regexMatch $hostPattern $h) }}{{ printf "httpRoute.hostnames[%d]: %q is not a host name; %s\n" $i $h $hostFix }}{{ end -}}
{{- end -}}
{{- if not (hasPrefix "/" $r.path) -}}
{{- printf "httpRoute.path: %q does not start with /; write an absolute path, e.g. /\n" $r.path -}}
{{- end -}}
{{- range $name, $d := $r.timeouts -}}
{{- if not (regexMatch "^([0-9]{1,5}(h|m|s|ms)){1,4}$" (toString $d)) -}}
{{- printf "httpRoute.timeouts.%s: %q is not a Gateway API duration; write whole numbers with h, m, s or ms, e.g. 600s or 10m\n" $name (toString $d) -}}
{{- end -}}
{{- end -}}
{{- if and $guarded (not $r.gatewayFrom) -}}
{{- printf "httpRoute.gatewayFrom: empty while networkPolicy.enabled, so the agent's NetworkPolicy would drop every request of the Gateway's proxies (it lets in the API port only from networkPolicy.ingress.api=%s and apiFrom); name the proxies' pods, e.g. [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: envoy-gateway-system}}}], or set networkPolicy.ingress.api: any\n" $np.ingress.api -}}
{{- end -}}
{{- end -}}
{{- end -}}

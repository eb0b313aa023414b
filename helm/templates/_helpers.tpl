{{/* The chart's name: "limiter", or nameOverride. */}}
{{- define "limiter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
FULLNAME: the release name when it contains the chart's name, else RELEASE-NAME; at most 63
characters (a DNS label), since it names the headless Service the members are found by.
*/}}
{{- define "limiter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "limiter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "limiter.labels" -}}
helm.sh/chart: {{ include "limiter.chart" . }}
{{ include "limiter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: limiter
{{- end }}

{{/* What selects the chart's objects; add app.kubernetes.io/component to pick one kind. */}}
{{- define "limiter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "limiter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The shard nodes' pods: the StatefulSet, the headless Service and the PDB select these. */}}
{{- define "limiter.nodeSelectorLabels" -}}
{{ include "limiter.selectorLabels" . }}
app.kubernetes.io/component: node
{{- end }}

{{- define "limiter.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* The headless Service: its name is what members_dns resolves. */}}
{{- define "limiter.headlessService" -}}
{{- include "limiter.fullname" . }}
{{- end }}

{{/* NAME.NAMESPACE.svc.DOMAIN:PORT, resolving to every node's pod IP. */}}
{{- define "limiter.membersDns" -}}
{{- printf "%s.%s.svc.%s:%d" (include "limiter.headlessService" .) .Release.Namespace .Values.clusterDomain (int .Values.ports.data) }}
{{- end }}

{{/* The Secret holding the cluster secret; fails rendering when none is configured. */}}
{{- define "limiter.secretName" -}}
{{- if .Values.secret.existingSecret }}
{{- .Values.secret.existingSecret }}
{{- else if .Values.secret.value }}
{{- printf "%s-secret" (include "limiter.fullname" .) }}
{{- else }}
{{- fail "limiter: the cluster secret is missing: set secret.existingSecret (a Secret with the key 'secret') or secret.value (e.g. --set secret.value=$(openssl rand -hex 32))" }}
{{- end }}
{{- end }}

{{- define "limiter.secretKey" -}}
{{- if .Values.secret.existingSecret }}{{ .Values.secret.existingSecretKey | default "secret" }}{{ else }}secret{{ end }}
{{- end }}

{{/* Where things are mounted in the pods. */}}
{{- define "limiter.configDir" -}}/etc/limiter{{- end }}
{{- define "limiter.secretDir" -}}/var/run/limiter/secret{{- end }}
{{- define "limiter.tlsDir" -}}/var/run/limiter/tls{{- end }}
{{- define "limiter.dataDir" -}}/var/lib/limiterd{{- end }}

{{/* config.durability, checked: sync or interval. */}}
{{- define "limiter.durability" -}}
{{- $mode := toString .Values.config.durability | trim }}
{{- if not (has $mode (list "sync" "interval")) }}
{{- fail (printf "limiter: config.durability must be sync or interval; got '%s'" $mode) }}
{{- end }}
{{- $mode }}
{{- end }}

{{- define "limiter.tlsSecretName" -}}
{{- required "limiter: tls.enabled needs tls.secretName (a kubernetes.io/tls Secret that also holds ca.crt)" .Values.tls.secretName }}
{{- end }}

{{/* The policy file's text, checked to be a YAML map with a policies list. */}}
{{- define "limiter.policies" -}}
{{- $parsed := fromYaml .Values.policies }}
{{- if or (hasKey $parsed "Error") (not (kindIs "slice" (get $parsed "policies"))) }}
{{- fail "limiter: values.policies must be a YAML policy file (a string) with a `policies:` list, see README \"Policy file\"" }}
{{- end }}
{{- .Values.policies }}
{{- end }}

{{/* The pod and container securityContext every pod of the chart uses. */}}
{{- define "limiter.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "limiter.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
handoff.deadline in whole seconds. Only three simple forms are understood: N (seconds), Ns and
Nm; anything else (500ms, 1h, 1m30s) fails rendering. At most 600 (limiterd's own limit).
*/}}
{{- define "limiter.handoffSeconds" -}}
{{- $d := toString .Values.handoff.deadline | trim }}
{{- $seconds := 0 }}
{{- if regexMatch "^[0-9]+s?$" $d }}
{{- $seconds = trimSuffix "s" $d | atoi }}
{{- else if regexMatch "^[0-9]+m$" $d }}
{{- $seconds = mul (trimSuffix "m" $d | atoi) 60 }}
{{- else }}
{{- fail (printf "limiter: handoff.deadline must be whole seconds or minutes: N (seconds), Ns or Nm, e.g. 10s; got '%s'" $d) }}
{{- end }}
{{- if gt $seconds 600 }}
{{- fail (printf "limiter: handoff.deadline is at most 10m (600 s), limiterd's own limit; got '%s'" $d) }}
{{- end }}
{{- $seconds }}
{{- end }}

{{/* handoff.deadline as the node config's handoff_deadline: 0 (off), Ns or Nm. */}}
{{- define "limiter.handoffDeadline" -}}
{{- $seconds := include "limiter.handoffSeconds" . | atoi }}
{{- $d := toString .Values.handoff.deadline | trim }}
{{- if eq $seconds 0 }}0{{ else if hasSuffix "m" $d }}{{ $d }}{{ else }}{{ $seconds }}s{{ end }}
{{- end }}

{{/*
Fails rendering when terminationGracePeriodSeconds cannot hold a drain: the preStop hook waits
up to handoff.deadline + 5 s for the node to hand its keys over, and the kubelet kills the pod
at the end of the grace period whatever the hook is doing.
*/}}
{{- define "limiter.checkGracePeriod" -}}
{{- $handoff := include "limiter.handoffSeconds" . | atoi }}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- if lt $grace (add $handoff 5) }}
{{- fail (printf "limiter: terminationGracePeriodSeconds (%d) must be at least handoff.deadline (%d s) + 5 s = %d, or the kubelet kills a draining node before it has handed its keys over; raise terminationGracePeriodSeconds (deadline + 10 s is comfortable) or lower handoff.deadline" $grace $handoff (add $handoff 5)) }}
{{- end }}
{{- end }}

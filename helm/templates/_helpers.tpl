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

{{/*
The three credentials (values.yaml, secret:): each from its value, in the chart's Secret
FULLNAME-secret under a fixed key, else from secret.existingSecret under the key named in the
values. `limiter.credential` takes (list $ KIND), KIND one of gateway, peer, keySeed, and
gives YAML: value (what the chart puts in its Secret, "" when it comes from existingSecret),
secretName, key (in that Secret), file (its name in the pod, in dir), dir and what (its name
in messages). Fails rendering when the credential comes from neither.
*/}}
{{- define "limiter.credential" -}}
{{- $ := index . 0 }}
{{- $kind := index . 1 }}
{{- $s := $.Values.secret }}
{{- $c := dict }}
{{- if eq $kind "gateway" }}
{{- $c = dict "value" $s.value "valueField" "secret.value" "existingKey" ($s.existingSecretKey | default "secret") "keyField" "secret.existingSecretKey" "chartKey" "secret" "dir" (include "limiter.secretDir" $) "what" "the gateway secret" }}
{{- else if eq $kind "peer" }}
{{- $c = dict "value" $s.peerValue "valueField" "secret.peerValue" "existingKey" ($s.peerKey | default "peer-secret") "keyField" "secret.peerKey" "chartKey" "peer-secret" "dir" (include "limiter.peerSecretDir" $) "what" "the peer secret" }}
{{- else if eq $kind "keySeed" }}
{{- $c = dict "value" $s.keySeedValue "valueField" "secret.keySeedValue" "existingKey" ($s.keySeedKey | default "key-seed") "keyField" "secret.keySeedKey" "chartKey" "key-seed" "dir" (include "limiter.keySeedDir" $) "what" "the key-id seed" }}
{{- else }}
{{- fail (printf "limiter.credential: unknown kind %s" $kind) }}
{{- end }}
{{- $value := toString ($c.value | default "") }}
{{- if $value }}
value: {{ $value | quote }}
secretName: {{ include "limiter.ownSecretName" $ | quote }}
key: {{ $c.chartKey | quote }}
{{- else if $s.existingSecret }}
value: ""
secretName: {{ $s.existingSecret | quote }}
key: {{ $c.existingKey | quote }}
{{- else }}
{{- fail (printf "limiter: %s is missing: set %s (e.g. --set %s=$(openssl rand -hex 32)) or secret.existingSecret, a Secret holding it under the key %s ('%s'); values.yaml, secret:" $c.what $c.valueField $c.valueField $c.keyField $c.existingKey) }}
{{- end }}
file: {{ $c.chartKey | quote }}
dir: {{ $c.dir | quote }}
what: {{ $c.what | quote }}
valueField: {{ $c.valueField | quote }}
keyField: {{ $c.keyField | quote }}
{{- end }}

{{/* The chart's own Secret, made when any credential is given as a value (secret.yaml). */}}
{{- define "limiter.ownSecretName" -}}
{{- printf "%s-secret" (include "limiter.fullname" .) }}
{{- end }}

{{/* The Secret holding the gateway secret, and its key there. */}}
{{- define "limiter.secretName" -}}
{{- (include "limiter.credential" (list . "gateway") | fromYaml).secretName }}
{{- end }}

{{- define "limiter.secretKey" -}}
{{- (include "limiter.credential" (list . "gateway") | fromYaml).key }}
{{- end }}

{{/* A credential's file in the pods that mount it: DIR/FILE. */}}
{{- define "limiter.credentialFile" -}}
{{- $c := include "limiter.credential" . | fromYaml }}
{{- printf "%s/%s" $c.dir $c.file }}
{{- end }}

{{/*
A pod volume holding one credential (list $ KIND NAME), its one key only: a pod sees no other
key of that Secret. Mounted without subPath, so that a rotation reaches it in place.
*/}}
{{- define "limiter.credentialVolume" -}}
{{- $c := include "limiter.credential" (list (index . 0) (index . 1)) | fromYaml -}}
- name: {{ index . 2 }}
  secret:
    secretName: {{ $c.secretName }}
    defaultMode: 0440
    items:
      - key: {{ $c.key }}
        path: {{ $c.file }}
{{- end }}

{{/*
Fails rendering on credentials given as values that limiterd would refuse: a line outside
16-1024 bytes, more than two lines (current and next), a key seed of more than one value, a
peer secret sharing a line with the gateway secret. When secret.existingSecret is readable
(helm install/upgrade; helm template cannot look), a key the nodes need that it lacks fails
too, rather than leave the pods waiting on a FailedMount.
*/}}
{{- define "limiter.checkSecrets" -}}
{{- $lines := dict }}
{{- range $kind := list "gateway" "peer" "keySeed" }}
{{- $c := include "limiter.credential" (list $ $kind) | fromYaml }}
{{- $kept := list }}
{{- range splitList "\n" (toString ($c.value | default "")) }}
{{- $line := trim . }}
{{- if $line }}
{{- if or (lt (len $line) 16) (gt (len $line) 1024) }}
{{- fail (printf "limiter: %s (%s) must be 16 to 1024 bytes a line; a line has %d (openssl rand -hex 32 makes 64)" $c.valueField $c.what (len $line)) }}
{{- end }}
{{- $kept = append $kept $line }}
{{- end }}
{{- end }}
{{- if gt (len $kept) (ternary 1 2 (eq $kind "keySeed")) }}
{{- if eq $kind "keySeed" }}
{{- fail (printf "limiter: %s (the key-id seed) is one value, which never rotates; it has %d lines" $c.valueField (len $kept)) }}
{{- else }}
{{- fail (printf "limiter: %s (%s) has %d lines; at most two, the current and the next" $c.valueField $c.what (len $kept)) }}
{{- end }}
{{- end }}
{{- $_ := set $lines $kind $kept }}
{{- end }}
{{- range $line := get $lines "peer" }}
{{- if has $line (get $lines "gateway") }}
{{- fail "limiter: secret.peerValue (the peer secret) shares a value with secret.value (the gateway secret): every gateway holding it could act as a node, and limiterd refuses to start; give the nodes a peer secret of their own (openssl rand -hex 32)" }}
{{- end }}
{{- end }}
{{- with .Values.secret.existingSecret }}
{{- $found := lookup "v1" "Secret" $.Release.Namespace . }}
{{- if $found }}
{{- $data := get $found "data" | default dict }}
{{- range $kind := list "gateway" "peer" "keySeed" }}
{{- $c := include "limiter.credential" (list $ $kind) | fromYaml }}
{{- if and (eq $c.secretName $.Values.secret.existingSecret) (not (hasKey $data $c.key)) }}
{{- fail (printf "limiter: Secret %s has no key '%s' (%s): add it, or set %s (or %s to the key that holds it)" $c.secretName $c.key $c.what $c.valueField $c.keyField) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* Where things are mounted in the pods. */}}
{{- define "limiter.configDir" -}}/etc/limiter{{- end }}
{{- define "limiter.secretDir" -}}/var/run/limiter/secret{{- end }}
{{- define "limiter.peerSecretDir" -}}/var/run/limiter/peer-secret{{- end }}
{{- define "limiter.keySeedDir" -}}/var/run/limiter/key-seed{{- end }}
{{- define "limiter.peerCaDir" -}}/var/run/limiter/peer-ca{{- end }}
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
{{- fail "limiter: values.policies must be a YAML policy file (a string) with a `policies:` list, see docs/reference/policy-file.md" }}
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

{{/*
NetworkPolicy peers from (list FIELD VALUE), VALUE a list of `from` entries (values.yaml,
networkPolicy:), checked: each a map of podSelector and namespaceSelector (label selectors, {}
matching everything) and/or ipBlock (a cidr, optionally except), not empty. Gives them as a
YAML list, "" when there are none.
*/}}
{{- define "limiter.networkPeers" -}}
{{- $field := index . 0 }}
{{- $peers := index . 1 | default list }}
{{- if not (kindIs "slice" $peers) }}
{{- fail (printf "limiter: %s must be a list of NetworkPolicy peers (podSelector, namespaceSelector, ipBlock), e.g. [{podSelector: {matchLabels: {app: api}}}]; got %v" $field $peers) }}
{{- end }}
{{- range $i, $peer := $peers }}
{{- if or (not (kindIs "map" $peer)) (not $peer) }}
{{- fail (printf "limiter: %s[%d] must be a NetworkPolicy peer: a map of podSelector, namespaceSelector and/or ipBlock; got %v" $field $i $peer) }}
{{- end }}
{{- range $key, $value := $peer }}
{{- if not (has $key (list "podSelector" "namespaceSelector" "ipBlock")) }}
{{- fail (printf "limiter: %s[%d].%s: a NetworkPolicy peer has only podSelector, namespaceSelector and ipBlock" $field $i $key) }}
{{- end }}
{{- if not (kindIs "map" $value) }}
{{- fail (printf "limiter: %s[%d].%s must be a map ({matchLabels: {...}}, {} for all; ipBlock: {cidr: ...}); got %v" $field $i $key $value) }}
{{- end }}
{{- end }}
{{- if and (hasKey $peer "ipBlock") (not (regexMatch "^[0-9a-fA-F.:]+/[0-9]+$" (toString (index $peer.ipBlock "cidr")))) }}
{{- fail (printf "limiter: %s[%d].ipBlock.cidr must be a CIDR (e.g. 10.20.0.0/16)" $field $i) }}
{{- end }}
{{- end }}
{{- if $peers }}
{{- toYaml $peers }}
{{- end }}
{{- end }}

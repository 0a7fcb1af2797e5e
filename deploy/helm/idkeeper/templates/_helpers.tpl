{{/* Names, labels and the checks every rendering passes (fail closed: an unsafe choice does not render). */}}

{{- define "idkeeper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "idkeeper.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The selector labels of one component: include "idkeeper.selector" (list . "registry") */}}
{{- define "idkeeper.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "idkeeper.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "idkeeper.labels" -}}
{{ include "idkeeper.selector" . }}
app.kubernetes.io/managed-by: {{ (index . 0).Release.Service }}
app.kubernetes.io/version: {{ (index . 0).Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" (index . 0).Chart.Name (index . 0).Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "idkeeper.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}

{{- define "idkeeper.serviceAccountName" -}}
{{- default (include "idkeeper.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "idkeeper.secretName" -}}
{{- default (printf "%s-secrets" (include "idkeeper.fullname" .)) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* The PVC name prefix of the registry's state volumes: state-<statefulset>-<ordinal>. */}}
{{- define "idkeeper.statePVCPrefix" -}}
{{- printf "state-%s-registry-" (include "idkeeper.fullname" .) -}}
{{- end -}}

{{- define "idkeeper.sharedStore" -}}
{{- if has .Values.store.type (list "redis" "redis-sentinel" "etcd" "postgres") }}true{{ end -}}
{{- end -}}

{{/* The gateway's idempotency store: "store" or "none". */}}
{{- define "idkeeper.gatewayIdempotency" -}}
{{- $canShare := has .Values.store.type (list "redis" "redis-sentinel" "etcd" "postgres") -}}
{{- $v := .Values.gateway.idempotencyStore -}}
{{- if eq $v "" }}{{ ternary "store" "none" $canShare }}{{ else }}{{ $v }}{{ end -}}
{{- end -}}

{{/* The pod security context of every pod: the image's non-root user. */}}
{{- define "idkeeper.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The security context of every container. */}}
{{- define "idkeeper.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The store's URL for the environment: IDKEEPER_STORE (no secret in it) or IDKEEPER_STORE_FILE (a Secret). */}}
{{- define "idkeeper.storeEnv" -}}
{{- if eq .Values.store.type "bolt" }}
- name: IDKEEPER_STORE
  value: bolt:/var/lib/idkeeper/idkeeper.db
{{- else if .Values.store.existingSecret }}
- name: IDKEEPER_STORE_FILE
  value: /run/idkeeper/store/{{ .Values.store.existingSecretKey }}
{{- else }}
- name: IDKEEPER_STORE
  value: {{ .Values.store.url | quote }}
{{- end }}
{{- if and (has .Values.store.type (list "redis" "redis-sentinel")) .Values.store.redis.prefix }}
- name: IDKEEPER_REDIS_PREFIX
  value: {{ .Values.store.redis.prefix | quote }}
{{- end }}
{{- end -}}

{{- define "idkeeper.storeVolume" -}}
{{- if and (ne .Values.store.type "bolt") .Values.store.existingSecret }}
- name: store-url
  secret:
    secretName: {{ .Values.store.existingSecret }}
    defaultMode: 0400
    items:
      - key: {{ .Values.store.existingSecretKey }}
        path: {{ .Values.store.existingSecretKey }}
{{- end }}
{{- end -}}

{{- define "idkeeper.storeVolumeMount" -}}
{{- if and (ne .Values.store.type "bolt") .Values.store.existingSecret }}
- name: store-url
  mountPath: /run/idkeeper/store
  readOnly: true
{{- end }}
{{- end -}}

{{/*
The checks: a values choice that is unsafe, or that cannot work, fails rendering with the reason.
*/}}
{{- define "idkeeper.validate" -}}
{{- $v := .Values -}}
{{- $types := list "bolt" "redis" "redis-sentinel" "etcd" "postgres" -}}
{{- if not $v.store.type -}}
{{- fail "store.type is empty: choose the store every registry replica shares (bolt, redis, redis-sentinel, etcd or postgres; docs/deploy.md, \"Kubernetes\")" -}}
{{- end -}}
{{- if not (has $v.store.type $types) -}}
{{- fail (printf "store.type %q is none of bolt, redis, redis-sentinel, etcd, postgres" $v.store.type) -}}
{{- end -}}
{{- if lt (int $v.registry.replicas) 1 -}}
{{- fail "registry.replicas must be at least 1" -}}
{{- end -}}
{{- if eq $v.store.type "bolt" -}}
{{- if gt (int $v.registry.replicas) 1 -}}
{{- fail (printf "store.type bolt with registry.replicas %d: a bolt store is one file on one replica's own state volume, so replicas would each grant from a pool of their own (duplicate node IDs). Use one replica, or a shared store (redis, redis-sentinel, etcd, postgres)" (int $v.registry.replicas)) -}}
{{- end -}}
{{- if or $v.store.url $v.store.existingSecret -}}
{{- fail "store.type bolt takes no store.url or store.existingSecret: its file lives on the registry's state volume" -}}
{{- end -}}
{{- else -}}
{{- if and (not $v.store.url) (not $v.store.existingSecret) -}}
{{- fail (printf "store.type %s needs store.url (a URL without a password) or store.existingSecret (a Secret holding the URL)" $v.store.type) -}}
{{- end -}}
{{- if and $v.store.url (not $v.store.existingSecret) -}}
{{- $u := urlParse $v.store.url -}}
{{- if contains ":" (default "" $u.userinfo) -}}
{{- fail "store.url holds a password: values are printed by `helm get values`. Put the URL in a Secret and name it in store.existingSecret" -}}
{{- end -}}
{{- if regexMatch "(?i)[?&](password|sentinel_password)=" $v.store.url -}}
{{- fail "store.url holds a password (password=): put the URL in a Secret and name it in store.existingSecret" -}}
{{- end -}}
{{- $schemes := dict "redis" (list "redis" "rediss") "redis-sentinel" (list "redis+sentinel" "rediss+sentinel") "etcd" (list "etcd" "etcds") "postgres" (list "postgres" "postgresql") -}}
{{- if not (has $u.scheme (get $schemes $v.store.type)) -}}
{{- fail (printf "store.url's scheme %q does not match store.type %s (expected %s)" $u.scheme $v.store.type (join " or " (get $schemes $v.store.type))) -}}
{{- end -}}
{{- end -}}
{{- if not $v.clockAgent.enabled -}}
{{- fail (printf "clockAgent.enabled false on the shared store %s: every replica must prove its clock to an agent (DESIGN §8, docs/clock.md)" $v.store.type) -}}
{{- end -}}
{{- end -}}
{{- if and (eq $v.store.type "redis-sentinel") (lt (int $v.store.redis.waitReplicas) 1) -}}
{{- fail "store.type redis-sentinel with store.redis.waitReplicas 0: a failover may then lose acknowledged grants and quarantine the pool; set it to at least 1 (docs/operations.md, \"Sentinel and Cluster\")" -}}
{{- end -}}
{{- if not (has $v.clockAgent.source (list "kernel" "ntp")) -}}
{{- fail (printf "clockAgent.source %q is neither kernel nor ntp" $v.clockAgent.source) -}}
{{- end -}}
{{- if and (eq $v.clockAgent.source "ntp") (lt (len $v.clockAgent.ntpServers) 3) -}}
{{- fail "clockAgent.source ntp needs at least three clockAgent.ntpServers (docs/clock.md)" -}}
{{- end -}}
{{- if $v.gateway.enabled -}}
{{- $idem := include "idkeeper.gatewayIdempotency" . -}}
{{- if not (has $idem (list "store" "none")) -}}
{{- fail (printf "gateway.idempotencyStore %q is neither store nor none" $idem) -}}
{{- end -}}
{{- if and (eq $idem "store") (not (has $v.store.type (list "redis" "redis-sentinel" "etcd" "postgres"))) -}}
{{- fail (printf "gateway.idempotencyStore store: the store %s cannot hold the gateway's records (redis, redis-sentinel, etcd or postgres can); use none" $v.store.type) -}}
{{- end -}}
{{- end -}}
{{- range $e := concat $v.registry.extraEnv $v.gateway.extraEnv -}}
{{- if and (regexMatch "(?i)(SECRET|PASSWORD|API_KEY|CONSUMER_KEYS|_STORE)$" $e.name) (hasKey $e "value") -}}
{{- fail (printf "extraEnv %s is a secret setting with a literal value: values are printed by `helm get values`; mount a Secret and use its _FILE variable" $e.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The pool and layout (pool.*), for init and the server alike: IDKEEPER_NODES, _NODE_RANGE, _LAYOUT, _EPOCH. */}}
{{- define "idkeeper.poolEnv" -}}
{{- with .Values.pool.nodes }}
- name: IDKEEPER_NODES
  value: {{ . | quote }}
{{- end }}
{{- with .Values.pool.nodeRange }}
- name: IDKEEPER_NODE_RANGE
  value: {{ . | quote }}
{{- end }}
{{- with .Values.pool.layout }}
- name: IDKEEPER_LAYOUT
  value: {{ . | quote }}
{{- end }}
{{- with .Values.pool.epoch }}
- name: IDKEEPER_EPOCH
  value: {{ . | quote }}
{{- end }}
{{- end -}}

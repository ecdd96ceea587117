{{/* The name of every object: the release's, with the chart's appended
unless it already holds it. */}}
{{- define "fenceproxy-authz.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fenceproxy-authz.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fenceproxy-authz.labels" -}}
{{ include "fenceproxy-authz.selector" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Exactly one store, or a message that says what to set. */}}
{{- define "fenceproxy-authz.checkStore" -}}
{{- $n := 0 -}}
{{- if .Values.redis.url }}{{ $n = add1 $n }}{{ end -}}
{{- if .Values.redis.existingSecret.name }}{{ $n = add1 $n }}{{ end -}}
{{- if .Values.redis.bundled.enabled }}{{ $n = add1 $n }}{{ end -}}
{{- if ne $n 1 -}}
{{- fail "fenceproxy-authz: set exactly one of redis.url, redis.existingSecret.name or redis.bundled.enabled=true (the store the replicas share their marks through)" -}}
{{- end -}}
{{- end -}}

{{/*
fenceproxy as a native sidecar, for an app chart to include. Every template
reads the app chart's .Values.fenceproxy and renders nothing unless
fenceproxy.enabled is true, so the includes can stay in the app's templates
whether or not fenceproxy is on. See README.md beside this file.
*/}}

{{/* The settings, with their defaults. */}}
{{- define "fenceproxy-sidecar.values" -}}
{{- $d := dict
  "enabled" false
  "image" (printf "fenceproxy:%s" "v0.1.0")
  "appPort" 0
  "port" 8080
  "adminPort" 9090
  "redis" (dict "url" "" "existingSecret" (dict "name" "" "key" "url"))
  "routesConfigMap" ""
  "envFrom" ""
  "env" (dict)
  "metricsNamespace" "monitoring"
-}}
{{- toYaml (mergeOverwrite $d (deepCopy (.Values.fenceproxy | default dict))) -}}
{{- end -}}

{{- define "fenceproxy-sidecar.enabled" -}}
{{- $v := include "fenceproxy-sidecar.values" . | fromYaml -}}
{{- if $v.enabled }}true{{ end -}}
{{- end -}}

{{/* The init container: include under spec.template.spec.initContainers. */}}
{{- define "fenceproxy-sidecar.container" -}}
{{- $v := include "fenceproxy-sidecar.values" . | fromYaml -}}
{{- if $v.enabled -}}
{{- if not $v.appPort -}}
{{- fail "fenceproxy.appPort: the port (a number) the app listens on, which fenceproxy forwards to on the pod's loopback" -}}
{{- end -}}
{{- if and (not $v.redis.url) (not $v.redis.existingSecret.name) (not $v.envFrom) -}}
{{- fail "fenceproxy: set redis.url, redis.existingSecret.name or envFrom (a ConfigMap with FENCE_REDIS_URL): the store the replicas share their marks through" -}}
{{- end -}}
{{- if or (eq (int $v.port) (int $v.appPort)) (eq (int $v.adminPort) (int $v.appPort)) (eq (int $v.port) (int $v.adminPort)) -}}
{{- fail (printf "fenceproxy.port (%v), fenceproxy.adminPort (%v) and fenceproxy.appPort (%v) must differ: they share the pod's network" $v.port $v.adminPort $v.appPort) -}}
{{- end -}}
# fenceproxy: a native sidecar (an init container with restartPolicy Always
# starts before the app containers and stops after them).
- name: fenceproxy
  image: {{ $v.image | quote }}
  imagePullPolicy: IfNotPresent
  restartPolicy: Always
  {{- with $v.envFrom }}
  envFrom:
    - configMapRef:
        name: {{ . }}
  {{- end }}
  env:
    - name: FENCE_UPSTREAM_URL
      value: "http://127.0.0.1:{{ $v.appPort }}"
    - name: FENCE_LISTEN_ADDR
      value: ":{{ $v.port }}"
    - name: FENCE_ADMIN_ADDR
      value: ":{{ $v.adminPort }}"
    {{- if or $v.redis.url $v.redis.existingSecret.name }}
    - name: FENCE_STORE
      value: redis
    - name: FENCE_REDIS_URL
      {{- if $v.redis.url }}
      value: {{ $v.redis.url | quote }}
      {{- else }}
      valueFrom:
        secretKeyRef:
          name: {{ $v.redis.existingSecret.name }}
          key: {{ $v.redis.existingSecret.key }}
      {{- end }}
    {{- end }}
    {{- if $v.routesConfigMap }}
    - name: FENCE_ROUTES_FILE
      value: /etc/fenceproxy/routes.yaml
    {{- end }}
    {{- range $k, $val := $v.env }}
    - name: {{ $k }}
      value: {{ $val | toString | quote }}
    {{- end }}
  ports:
    - name: fenced-http
      containerPort: {{ $v.port }}
      protocol: TCP
    - name: fence-admin
      containerPort: {{ $v.adminPort }}
      protocol: TCP
  startupProbe:
    httpGet:
      path: /healthz
      port: fence-admin
    periodSeconds: 1
    failureThreshold: 30
    timeoutSeconds: 1
  livenessProbe:
    httpGet:
      path: /healthz
      port: fence-admin
    periodSeconds: 10
    failureThreshold: 3
    timeoutSeconds: 2
  readinessProbe:
    httpGet:
      path: /readyz
      port: fence-admin
    periodSeconds: 5
    failureThreshold: 2
    timeoutSeconds: 2
  resources:
    requests:
      cpu: 50m
      memory: 32Mi
    limits:
      cpu: "1"
      memory: 128Mi
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    privileged: false
    capabilities:
      drop: ["ALL"]
    seccompProfile:
      type: RuntimeDefault
  {{- if $v.routesConfigMap }}
  volumeMounts:
    - name: fenceproxy-routes
      mountPath: /etc/fenceproxy
      readOnly: true
  {{- end }}
{{- end -}}
{{- end -}}

{{/* The routes volume: include under spec.template.spec.volumes. */}}
{{- define "fenceproxy-sidecar.volumes" -}}
{{- $v := include "fenceproxy-sidecar.values" . | fromYaml -}}
{{- if and $v.enabled $v.routesConfigMap -}}
- name: fenceproxy-routes
  configMap:
    name: {{ $v.routesConfigMap }}
{{- end -}}
{{- end -}}

{{/* Pod template labels: include under spec.template.metadata.labels. */}}
{{- define "fenceproxy-sidecar.podLabels" -}}
{{- if include "fenceproxy-sidecar.enabled" . -}}
fenceproxy/sidecar: "true"
{{- end -}}
{{- end -}}

{{/* Pod template annotations (fenceproxy's metrics): include under
spec.template.metadata.annotations, unless the app's own use them. */}}
{{- define "fenceproxy-sidecar.podAnnotations" -}}
{{- $v := include "fenceproxy-sidecar.values" . | fromYaml -}}
{{- if $v.enabled -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ $v.adminPort | quote }}
prometheus.io/path: /metrics
{{- end -}}
{{- end -}}

{{/* A Service port's targetPort: fenceproxy's data port when it is on, the
app's port (the argument) when not.
  targetPort: {{ include "fenceproxy-sidecar.targetPort" (dict "ctx" $ "port" "http") }} */}}
{{- define "fenceproxy-sidecar.targetPort" -}}
{{- $v := include "fenceproxy-sidecar.values" .ctx | fromYaml -}}
{{- if $v.enabled }}{{ $v.port }}{{ else }}{{ .port }}{{ end -}}
{{- end -}}

{{/* The NetworkPolicy admitting ingress to the app's pods on fenceproxy's
ports only, so that the app's own port is reached through the sidecar
alone. Traffic from the pod's own node (the kubelet's probes) is not
subject to NetworkPolicy. Ports are numbers: some network plugins do not
resolve a native sidecar's named ports.
  {{ include "fenceproxy-sidecar.networkPolicy" (dict "ctx" $ "name" (include "app.fullname" .) "selector" (include "app.selectorLabels" .)) }} */}}
{{- define "fenceproxy-sidecar.networkPolicy" -}}
{{- $v := include "fenceproxy-sidecar.values" .ctx | fromYaml -}}
{{- if $v.enabled -}}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ .name }}-fenceproxy
spec:
  podSelector:
    matchLabels:
      {{- .selector | nindent 6 }}
  policyTypes:
    - Ingress
  ingress:
    - ports:
        - port: {{ $v.port }}
          protocol: TCP
    - from:
        - namespaceSelector:
            matchLabels:
              kubernetes.io/metadata.name: {{ $v.metricsNamespace }}
      ports:
        - port: {{ $v.adminPort }}
          protocol: TCP
{{- end -}}
{{- end -}}

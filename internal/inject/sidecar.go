package inject

import (
	"bytes"
	"encoding/json"
	"strings"
	"text/template"

	"go.yaml.in/yaml/v3"
)

// sidecarTemplate is the container deploy/base/sidecar.yaml adds, with the
// ports, the upstream and the store spelled out in env instead of a
// generated ConfigMap (a test in the deploy module keeps the two equal).
// Values are JSON strings, which YAML reads as double-quoted scalars.
var sidecarTemplate = template.Must(template.New("sidecar").Funcs(template.FuncMap{"q": jsonString}).Parse(`
# Added by fenceproxy inject: a native sidecar (an init container with
# restartPolicy Always starts before the app containers and stops after
# them). The Service sends to its port {{.Data}}; it forwards to the app on
# the pod's loopback.
name: fenceproxy
image: {{q .Image}}
imagePullPolicy: IfNotPresent
restartPolicy: Always
{{- if .EnvFrom}}
envFrom:
  - configMapRef:
      name: {{q .EnvFrom}}
{{- end}}
env:
  - name: FENCE_UPSTREAM_URL
    value: {{q .Upstream}}
  - name: FENCE_LISTEN_ADDR
    value: ":{{.Data}}"
  - name: FENCE_ADMIN_ADDR
    value: ":{{.Admin}}"
{{- if or .RedisURL .SecretName}}
  - name: FENCE_STORE
    value: redis
  - name: FENCE_REDIS_URL
{{- if .RedisURL}}
    value: {{q .RedisURL}}
{{- else}}
    valueFrom:
      secretKeyRef:
        name: {{q .SecretName}}
        key: {{q .SecretKey}}
{{- end}}
{{- end}}
{{- if .Routes}}
  - name: FENCE_ROUTES_FILE
    value: /etc/fenceproxy/routes.yaml
{{- end}}
ports:
  - name: fenced-http
    containerPort: {{.Data}}
    protocol: TCP
  - name: fence-admin
    containerPort: {{.Admin}}
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
{{- if .Routes}}
volumeMounts:
  - name: fenceproxy-routes
    mountPath: /etc/fenceproxy
    readOnly: true
{{- end}}
`))

var policyTemplate = template.Must(template.New("policy").Funcs(template.FuncMap{"q": jsonString}).Parse(`
# Added by fenceproxy inject: ingress to the pods of {{.Workload}} on
# fenceproxy's ports only, so that the app's own port is reached through
# the sidecar alone. Traffic from the pod's own node (the kubelet's probes)
# is not subject to NetworkPolicy. Ports are numbers: some network plugins
# do not resolve a native sidecar's named ports.
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{q .Name}}
{{- if .Namespace}}
  namespace: {{q .Namespace}}
{{- end}}
  labels:
    app.kubernetes.io/managed-by: fenceproxy-inject
spec:
  podSelector: {}
  policyTypes:
    - Ingress
  ingress:
    # fenceproxy's data port, from everyone the Service served before.
    - ports:
        - port: {{.Data}}
          protocol: TCP
    # Its admin port (/metrics) from the monitoring namespace only.
    - from:
        - namespaceSelector:
            matchLabels:
              kubernetes.io/metadata.name: {{q .MetricsNamespace}}
      ports:
        - port: {{.Admin}}
          protocol: TCP
`))

func jsonString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// fromTemplate executes t with data and returns the mapping it yields.
func fromTemplate(t *template.Template, data any) *yaml.Node {
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		panic(err) // the templates are constants and their data plain values
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b.Bytes(), &n); err != nil {
		panic(err)
	}
	m := n.Content[0]
	// The template's opening comment belongs to the object, wherever the
	// parser hung it (the document, the mapping or its first key).
	m.HeadComment = strings.TrimSpace(n.HeadComment + "\n" + m.HeadComment + "\n" + m.Content[0].HeadComment)
	m.Content[0].HeadComment = ""
	plain(m)
	return m
}

type sidecarData struct {
	Image, EnvFrom, Upstream, RedisURL, SecretName, SecretKey string
	Data, Admin                                               int32
	Routes                                                    bool
}

func sidecar(o Options, app, data, admin int32) *yaml.Node {
	d := sidecarData{Image: o.Image, EnvFrom: o.EnvFrom, RedisURL: o.RedisURL, Data: data, Admin: admin,
		Upstream: "http://127.0.0.1:" + itoa(app), Routes: o.RoutesConfigMap != ""}
	if o.RedisSecret != "" {
		d.SecretName, d.SecretKey, _ = strings.Cut(o.RedisSecret, ":")
		if d.SecretKey == "" {
			d.SecretKey = DefaultSecretKey
		}
	}
	return fromTemplate(sidecarTemplate, d)
}

func policy(w *workload, metricsNS string) *yaml.Node {
	m := fromTemplate(policyTemplate, struct {
		Workload, Name, Namespace, MetricsNamespace string
		Data, Admin                                 int32
	}{w.obj.String(), w.obj.name + PolicySuffix, w.obj.ns, metricsNS, w.data, w.admin})
	// The workload's own selector: exactly its pods.
	set(get(m, "spec"), "podSelector", clone(w.selector), "")
	return m
}

var routesVolume = template.Must(template.New("volume").Funcs(template.FuncMap{"q": jsonString}).Parse(`
name: fenceproxy-routes
configMap:
  name: {{q .}}
`))

// plain drops the quotes the template needed: the encoder quotes again any
// string that would read as another type ("true", "8080").
func plain(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Style == yaml.DoubleQuotedStyle {
		n.Style = 0
	}
	for _, c := range n.Content {
		plain(c)
	}
}

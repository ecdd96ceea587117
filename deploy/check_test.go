package deploy

import (
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

var sampleDir = filepath.Join("examples", "sample-app")

// renderJSON renders the kustomization in dir, each object as JSON: once
// per test, for the tests to decode a fresh copy to change.
func renderJSON(t *testing.T, dir string) [][]byte {
	t.Helper()
	m, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, r := range m.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, data)
	}
	return docs
}

// sampleJSON renders the sample app once; sampleObjects decodes a fresh copy
// of it for each test to change.
func sampleJSON(t *testing.T) [][]byte { return renderJSON(t, sampleDir) }

func sampleObjects(t *testing.T, docs [][]byte) []Object {
	t.Helper()
	var objs []Object
	for _, d := range docs {
		o, err := DecodeJSON(d)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	return objs
}

// get returns the object of type T whose name is name, or, for generated
// ConfigMaps, name plus the hash suffix.
func get[T any](t *testing.T, objs []Object, name string) T {
	t.Helper()
	for _, o := range objs {
		if v, ok := o.Obj.(T); ok && (o.Name == name || strings.HasPrefix(o.Name, name+"-") && o.GVK.Kind == "ConfigMap") {
			return v
		}
	}
	t.Fatalf("no %T named %s", *new(T), name)
	panic("unreachable")
}

// The sample app's objects, for the tests below to change.
type sample struct {
	objs    []Object
	app     *appsv1.Deployment
	sidecar *corev1.Container
	appC    *corev1.Container
	env     *corev1.ConfigMap
	routes  *corev1.ConfigMap
	svc     *corev1.Service
	redisSv *corev1.Service
	policy  *networkingv1.NetworkPolicy
	redis   *appsv1.StatefulSet
	redisC  *corev1.Container
	redisCM *corev1.ConfigMap
}

func loadSample(t *testing.T, docs [][]byte) *sample {
	objs := sampleObjects(t, docs)
	s := &sample{
		objs:    objs,
		app:     get[*appsv1.Deployment](t, objs, "sample-app"),
		env:     get[*corev1.ConfigMap](t, objs, "fenceproxy-env"),
		routes:  get[*corev1.ConfigMap](t, objs, "fenceproxy-routes"),
		svc:     get[*corev1.Service](t, objs, "sample-app"),
		redisSv: get[*corev1.Service](t, objs, "redis"),
		policy:  get[*networkingv1.NetworkPolicy](t, objs, "sample-app-ingress"),
		redis:   get[*appsv1.StatefulSet](t, objs, "redis"),
		redisCM: get[*corev1.ConfigMap](t, objs, "redis-config"),
	}
	pod := &s.app.Spec.Template.Spec
	for i := range pod.InitContainers {
		if pod.InitContainers[i].Name == SidecarName {
			s.sidecar = &pod.InitContainers[i]
		}
	}
	if s.sidecar == nil || len(pod.Containers) != 1 || len(s.redis.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("the sample app changed shape: update loadSample")
	}
	s.appC = &pod.Containers[0]
	s.redisC = &s.redis.Spec.Template.Spec.Containers[0]
	return s
}

// without removes the object named name of the given kind.
func (s *sample) without(kind, name string) { s.objs = withoutObject(s.objs, kind, name) }

// withoutObject returns objs without the object named name of the given kind.
func withoutObject(objs []Object, kind, name string) []Object {
	return slices.DeleteFunc(objs, func(o Object) bool { return o.GVK.Kind == kind && o.Name == name })
}

// TestSampleApp checks the sample app beyond Check: it has a Service, a
// NetworkPolicy and a durable Redis, and its sidecar uses fenceproxy's
// default ports.
func TestSampleApp(t *testing.T) {
	s := loadSample(t, sampleJSON(t))
	rep := Check(s.objs)
	if err := rep.Err(); err != nil {
		t.Fatalf("checks:\n%v", err)
	}
	if len(rep.Fenced) != 1 {
		t.Fatalf("want one fenced workload, got %+v", rep.Fenced)
	}
	f := rep.Fenced[0]
	if f.Workload != "Deployment/fenceproxy-sample/sample-app" || len(f.Services) == 0 || len(f.NetworkPolicies) == 0 {
		t.Errorf("want the sample app behind a Service and a NetworkPolicy, got %+v", f)
	}
	if f.Redis != "StatefulSet/fenceproxy-sample/redis" {
		t.Errorf("FENCE_REDIS_URL reaches %q, want the sample's Redis StatefulSet", f.Redis)
	}
	cfg := f.Config
	if cfg.Store != "redis" || len(cfg.Routes.Routes) != 3 || cfg.UpstreamURL.String() != "http://127.0.0.1:5678" {
		t.Errorf("config: store %s, %d routes, upstream %s", cfg.Store, len(cfg.Routes.Routes), cfg.UpstreamURL)
	}
	// The sidecar uses fenceproxy's default ports, which the Dockerfile
	// EXPOSEs and the README documents.
	ports := defaultPorts(t)
	for i, a := range []string{cfg.ListenAddr, cfg.AdminAddr} {
		if _, p, _ := net.SplitHostPort(a); p != ports[i] {
			t.Errorf("%s: want the default port %s", a, ports[i])
		}
	}
	if s.svc.Spec.Ports[0].TargetPort != intstr.FromString(DataPortName) {
		t.Errorf("the Service targets %s, want the sidecar's named port %s", s.svc.Spec.Ports[0].TargetPort.String(), DataPortName)
	}
}

// checkCase breaks the sample app one way: Check must report a finding
// containing want, at level.
type checkCase struct {
	name   string
	break_ func(s *sample)
	want   string
	level  level
}

// sampleBreaks are the cases of TestChecksCanFail, also run by
// TestFindingMessages.
func sampleBreaks() []checkCase {
	setEnv := func(s *sample, k, v string) { s.env.Data[k] = v }
	return []checkCase{
		// The native sidecar.
		{"sidecar without restartPolicy", func(s *sample) { s.sidecar.RestartPolicy = nil }, "restartPolicy must be Always", errLevel},
		{"sidecar as a regular container", func(s *sample) {
			pod := &s.app.Spec.Template.Spec
			pod.Containers = append(pod.Containers, *s.sidecar)
			pod.InitContainers = nil
		}, "is a regular container", errLevel},
		// Probes.
		{"liveness on /readyz", func(s *sample) { s.sidecar.LivenessProbe.HTTPGet.Path = "/readyz" }, `livenessProbe.httpGet.path is "/readyz"`, warnLevel},
		{"readiness on /healthz", func(s *sample) { s.sidecar.ReadinessProbe.HTTPGet.Path = "/healthz" }, `readinessProbe.httpGet.path is "/healthz"`, warnLevel},
		{"readiness on the data port", func(s *sample) { s.sidecar.ReadinessProbe.HTTPGet.Port = intstr.FromString(DataPortName) }, "readinessProbe.httpGet.port", warnLevel},
		{"liveness on a number that is not admin", func(s *sample) { s.sidecar.LivenessProbe.HTTPGet.Port = intstr.FromInt32(9091) }, "livenessProbe.httpGet.port", warnLevel},
		{"no readiness", func(s *sample) { s.sidecar.ReadinessProbe = nil }, "readinessProbe is missing", warnLevel},
		{"startup by exec", func(s *sample) {
			s.sidecar.StartupProbe.HTTPGet = nil
			s.sidecar.StartupProbe.Exec = &corev1.ExecAction{Command: []string{"true"}}
		}, "startupProbe must be an httpGet", warnLevel},
		// Ports against the configuration fenceproxy loads.
		{"admin container port drifts", func(s *sample) { s.sidecar.Ports[1].ContainerPort = 9091 }, `FENCE_ADMIN_ADDR ":9090" does not match`, errLevel},
		{"listen address drifts", func(s *sample) { setEnv(s, "FENCE_LISTEN_ADDR", ":8081") }, `FENCE_LISTEN_ADDR ":8081" does not match`, errLevel},
		{"sidecar on loopback", func(s *sample) { setEnv(s, "FENCE_LISTEN_ADDR", "127.0.0.1:8080") }, "must listen on every interface", errLevel},
		{"data port renamed", func(s *sample) { s.sidecar.Ports[0].Name = "http" }, "no container port named fenced-http", errLevel},
		// config.Load and the routes file.
		{"bad env value", func(s *sample) { setEnv(s, "FENCE_STORE_TIMEOUT", "soon") }, "FENCE_STORE_TIMEOUT", errLevel},
		{"env ConfigMap missing", func(s *sample) { s.without("ConfigMap", s.env.Name) }, "envFrom ConfigMap", errLevel},
		{"routes with an unknown key", func(s *sample) {
			s.routes.Data["routes.yaml"] = strings.Replace(s.routes.Data["routes.yaml"], "compare:", "comparison:", 1)
		}, "comparison", errLevel},
		{"routes with a param the path lacks", func(s *sample) {
			s.routes.Data["routes.yaml"] = strings.Replace(s.routes.Data["routes.yaml"], "resource: orders/{orderID}", "resource: orders/{id}", 1)
		}, "FENCE_ROUTES_FILE", errLevel},
		{"routes file elsewhere", func(s *sample) { setEnv(s, "FENCE_ROUTES_FILE", "/etc/other/routes.yaml") }, "no volume is mounted there", errLevel},
		{"routes file misnamed", func(s *sample) { setEnv(s, "FENCE_ROUTES_FILE", "/etc/fenceproxy/routes.yml") }, `has no file "routes.yml"`, errLevel},
		{"routes not mounted", func(s *sample) { s.sidecar.VolumeMounts = nil }, "no volume is mounted there", errLevel},
		// The app behind the sidecar: on loopback (these cases), or
		// declaring its port behind a NetworkPolicy (TestEitherLoopbackOrPolicy).
		{"upstream not on loopback", func(s *sample) { setEnv(s, "FENCE_UPSTREAM_URL", "http://sample-app:5678") }, "must be the app on the pod's loopback", errLevel},
		{"app on every interface", func(s *sample) { s.without("NetworkPolicy", "sample-app-ingress"); s.appC.Args[0] = "-listen=:5678" }, `listens on ":5678"`, errLevel},
		{"app on the pod IP", func(s *sample) {
			s.without("NetworkPolicy", "sample-app-ingress")
			s.appC.Args[0] = "-listen=0.0.0.0:5678"
		}, `listens on "0.0.0.0:5678"`, errLevel},
		{"app listen address implicit", func(s *sample) { s.without("NetworkPolicy", "sample-app-ingress"); s.appC.Args = s.appC.Args[1:] }, "make the loopback address explicit", errLevel},
		{"app declares its port", func(s *sample) {
			s.policy.Spec.Ingress[0].Ports = nil
			s.appC.Ports = []corev1.ContainerPort{{Name: "app", ContainerPort: 5678}}
		}, "declares port 5678", errLevel},
		{"upstream is the sidecar", func(s *sample) { setEnv(s, "FENCE_UPSTREAM_URL", "http://127.0.0.1:8080") }, "is the sidecar's own port", errLevel},
		// The Service.
		{"Service targets the app port", func(s *sample) { s.svc.Spec.Ports[0].TargetPort = intstr.FromInt32(5678) }, "not a port of the sidecar", errLevel},
		{"Service targets an app port name", func(s *sample) { s.svc.Spec.Ports[0].TargetPort = intstr.FromString("http") }, "not a port of the sidecar", errLevel},
		{"Service targetPort defaults to port", func(s *sample) {
			s.svc.Spec.Ports[0].TargetPort = intstr.IntOrString{}
			s.svc.Spec.Ports[0].Port = 5678
		}, "not a port of the sidecar", errLevel},
		{"unnamed Service port targets the app", func(s *sample) {
			s.svc.Spec.Ports[0].Name = ""
			s.svc.Spec.Ports[0].TargetPort = intstr.FromInt32(5678)
		}, "Service sample-app port 80 has targetPort 5678, not a port of the sidecar", errLevel},
		// NetworkPolicies.
		{"policy rule without ports", func(s *sample) { s.policy.Spec.Ingress[0].Ports = nil }, "admits every port", errLevel},
		{"policy admits the app port", func(s *sample) { s.policy.Spec.Ingress[0].Ports[0].Port = ptr.To(intstr.FromInt32(5678)) }, "admits port 5678", errLevel},
		{"policy admits a range", func(s *sample) { s.policy.Spec.Ingress[0].Ports[0].EndPort = ptr.To[int32](9000) }, "port range", errLevel},
		{"admin port open to all", func(s *sample) { s.policy.Spec.Ingress[1].From = nil }, "admin port 9090 from everyone", warnLevel},
		// Without a policy, the app on loopback is enough (a warning); an
		// app that declares or opens its port needs the policy.
		{"no policy", func(s *sample) { s.without("NetworkPolicy", "sample-app-ingress") }, "no NetworkPolicy restricts ingress to the pods: the app is on loopback", warnLevel},
		{"policy selects other pods", func(s *sample) {
			s.policy.Spec.PodSelector.MatchLabels = map[string]string{"app.kubernetes.io/name": "other"}
		}, "no NetworkPolicy restricts ingress", warnLevel},
		{"egress-only policy", func(s *sample) {
			s.policy.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
		}, "no NetworkPolicy restricts ingress", warnLevel},
		{"no policy, app declares its port", func(s *sample) {
			s.without("NetworkPolicy", "sample-app-ingress")
			s.appC.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 5678}}
		}, "declares port 5678 and no NetworkPolicy keeps it from outside the pod", errLevel},
		{"no policy, app on every interface", func(s *sample) {
			s.without("NetworkPolicy", "sample-app-ingress")
			s.appC.Args[0] = "-listen=:5678"
		}, "no NetworkPolicy restricts ingress to the pods: any other port", errLevel},
		{"policy admits the app port, app on every interface", func(s *sample) {
			s.policy.Spec.Ingress[0].Ports[0].Port = ptr.To(intstr.FromInt32(5678))
			s.appC.Args[0] = "-listen=:5678"
		}, `listens on ":5678" (its command, args or env) and no NetworkPolicy keeps that port`, errLevel},
		// The app's own probes: the kubelet dials the pod IP from the node,
		// and resolves a named port among the container's own ports.
		{"app probe on its loopback port", func(s *sample) {
			s.appC.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(5678)}}}
		}, "readinessProbe.httpGet.port 5678: the app listens on 127.0.0.1:5678, loopback only", errLevel},
		{"app probe names a port it no longer declares", func(s *sample) {
			s.appC.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}}}
		}, `livenessProbe.httpGet.port "http" names no port of the container (it declares none)`, errLevel},
		{"app tcp probe on the node's loopback", func(s *sample) {
			s.appC.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: "127.0.0.1", Port: intstr.FromInt32(5679)}}}
		}, `startupProbe.tcpSocket.host "127.0.0.1" is the node's loopback`, errLevel},
		{"app grpc probe on its loopback port", func(s *sample) {
			s.appC.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 5678}}}
		}, "livenessProbe.grpc.port 5678", errLevel},
		{"another policy admits all", func(s *sample) {
			np := s.policy.DeepCopy()
			np.Name = "allow-all"
			np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}}
			s.objs = append(s.objs, Object{GVK: networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"), Namespace: np.Namespace, Name: np.Name, Obj: np})
		}, "NetworkPolicy allow-all ingress[0] admits every port", errLevel},
		// Security context, resources, host access, images.
		{"sidecar writable root", func(s *sample) { s.sidecar.SecurityContext.ReadOnlyRootFilesystem = ptr.To(false) }, "container fenceproxy: securityContext.readOnlyRootFilesystem", warnLevel},
		{"sidecar may be root", func(s *sample) {
			s.sidecar.SecurityContext.RunAsNonRoot = nil
			s.app.Spec.Template.Spec.SecurityContext.RunAsNonRoot = nil
		}, "container fenceproxy: securityContext.runAsNonRoot", warnLevel},
		{"sidecar as uid 0", func(s *sample) { s.sidecar.SecurityContext.RunAsUser = ptr.To[int64](0) }, "numeric non-root user", warnLevel},
		{"sidecar as another uid", func(s *sample) { s.sidecar.SecurityContext.RunAsUser = ptr.To[int64](1000) }, "runAsUser must be 65532", warnLevel},
		{"sidecar escalates", func(s *sample) { s.sidecar.SecurityContext.AllowPrivilegeEscalation = nil }, "container fenceproxy: securityContext.allowPrivilegeEscalation", warnLevel},
		{"sidecar privileged", func(s *sample) { s.sidecar.SecurityContext.Privileged = ptr.To(true) }, "privileged must not be true", warnLevel},
		{"sidecar keeps capabilities", func(s *sample) { s.sidecar.SecurityContext.Capabilities.Drop = nil }, "capabilities.drop must contain ALL", warnLevel},
		{"sidecar adds a capability", func(s *sample) {
			s.sidecar.SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, "capabilities.add must be empty", warnLevel},
		{"no seccomp", func(s *sample) {
			s.sidecar.SecurityContext.SeccompProfile = nil
			s.app.Spec.Template.Spec.SecurityContext.SeccompProfile = nil
		}, "container fenceproxy: securityContext.seccompProfile", warnLevel},
		{"unconfined seccomp", func(s *sample) {
			s.sidecar.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined
		}, "container fenceproxy: securityContext.seccompProfile", warnLevel},
		{"app writable root", func(s *sample) { s.appC.SecurityContext.ReadOnlyRootFilesystem = nil }, "container app: securityContext.readOnlyRootFilesystem", warnLevel},
		{"redis escalates", func(s *sample) { s.redisC.SecurityContext.AllowPrivilegeEscalation = ptr.To(true) }, "container redis: securityContext.allowPrivilegeEscalation", warnLevel},
		{"sidecar without limits", func(s *sample) { s.sidecar.Resources.Limits = nil }, "container fenceproxy: resources.limits.cpu must be set", warnLevel},
		{"sidecar without memory request", func(s *sample) { delete(s.sidecar.Resources.Requests, corev1.ResourceMemory) }, "container fenceproxy: resources.requests.memory must be set", warnLevel},
		{"request above limit", func(s *sample) { s.sidecar.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2") }, "exceeds the limit", warnLevel},
		{"host network", func(s *sample) { s.app.Spec.Template.Spec.HostNetwork = true }, "hostNetwork", errLevel},
		{"host PID", func(s *sample) { s.app.Spec.Template.Spec.HostPID = true }, "hostPID/hostIPC must be false", warnLevel},
		{"host port", func(s *sample) { s.sidecar.Ports[0].HostPort = 8080 }, "hostPort 8080", errLevel},
		{"latest image", func(s *sample) { s.appC.Image = "docker.io/hashicorp/http-echo:latest" }, "explicit tag", warnLevel},
		{"untagged sidecar image", func(s *sample) { s.sidecar.Image = "fenceproxy" }, "explicit tag", warnLevel},
		// Shutdown.
		{"grace below the drain", func(s *sample) { s.app.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](25) }, "terminationGracePeriodSeconds 25s", warnLevel},
		{"drain above the grace", func(s *sample) { setEnv(s, "FENCE_SHUTDOWN_TIMEOUT", "40s") }, "FENCE_SHUTDOWN_TIMEOUT (40s)", warnLevel},
		{"default grace", func(s *sample) { s.app.Spec.Template.Spec.TerminationGracePeriodSeconds = nil }, "terminationGracePeriodSeconds 30s", warnLevel},
		// Metrics.
		{"scrape the data port", func(s *sample) { s.app.Spec.Template.Annotations["prometheus.io/port"] = "8080" }, "prometheus.io/port=9090", warnLevel},
		{"no scrape annotations", func(s *sample) { s.app.Spec.Template.Annotations = nil }, "prometheus.io/scrape=true", warnLevel},
		// The store.
		{"memory store", func(s *sample) { setEnv(s, "FENCE_STORE", "memory"); delete(s.env.Data, "FENCE_REDIS_URL") }, "memory forgets", errLevel},
		{"bolt with replicas", func(s *sample) { setEnv(s, "FENCE_STORE", "bolt"); delete(s.env.Data, "FENCE_REDIS_URL") }, "keeps marks per pod", errLevel},
		{"bolt on the read-only root", func(s *sample) {
			setEnv(s, "FENCE_STORE", "bolt")
			delete(s.env.Data, "FENCE_REDIS_URL")
			s.app.Spec.Replicas = ptr.To[int32](1)
		}, "FENCE_BOLT_PATH \"fenceproxy.db\" must be on a writable persistent volume", errLevel},
		{"redis URL wrong port", func(s *sample) { setEnv(s, "FENCE_REDIS_URL", "redis://redis-0.redis:6380/0") }, "port 6380 is not a port of Service redis", errLevel},
		{"redis URL spreads over replicas", func(s *sample) {
			setEnv(s, "FENCE_REDIS_URL", "redis://redis:6379/0")
			s.redis.Spec.Replicas = ptr.To[int32](3)
		}, "spreads connections over 3 Redis pods", errLevel},
		{"redis URL at the app", func(s *sample) { setEnv(s, "FENCE_REDIS_URL", "redis://sample-app:80/0") }, "runs no redis-server", errLevel},
		{"redis appendfsync everysec", func(s *sample) {
			s.redisCM.Data["redis.conf"] = strings.Replace(s.redisCM.Data["redis.conf"], "appendfsync always", "appendfsync everysec", 1)
		}, `appendfsync is "everysec"`, errLevel},
		{"redis without AOF", func(s *sample) {
			s.redisCM.Data["redis.conf"] = strings.Replace(s.redisCM.Data["redis.conf"], "appendonly yes", "", 1)
		}, `appendonly is ""`, errLevel},
		{"redis evicts", func(s *sample) {
			s.redisCM.Data["redis.conf"] += "maxmemory-policy allkeys-lru\n"
		}, `maxmemory-policy is "allkeys-lru"`, errLevel},
		{"redis args override the file", func(s *sample) { s.redisC.Args = append(s.redisC.Args, "--appendonly", "no") }, `appendonly is "no"`, errLevel},
		{"redis config not mounted", func(s *sample) { s.redisC.VolumeMounts = s.redisC.VolumeMounts[:1] }, "config file /etc/redis/redis.conf", errLevel},
		{"redis without a PVC", func(s *sample) { s.redis.Spec.VolumeClaimTemplates = nil }, "volumeClaimTemplates", errLevel},
		{"redis dir off the volume", func(s *sample) {
			s.redisCM.Data["redis.conf"] = strings.Replace(s.redisCM.Data["redis.conf"], "dir /data", "dir /tmp", 1)
		}, `Redis dir "/tmp" is not on a persistent volume`, errLevel},
		{"redis without its governing Service", func(s *sample) { s.without("Service", "redis") }, `governing Service "redis"`, errLevel},
		{"redis service selects other pods", func(s *sample) {
			s.redisSv.Spec.Selector = map[string]string{"app.kubernetes.io/name": "other"}
		}, "does not select the Redis pods", errLevel},
		{"redis service not headless", func(s *sample) {
			s.redisSv.Spec.ClusterIP = ""
		}, "must be headless", errLevel},
	}
}

// TestChecksCanFail breaks the sample app one property at a time: Check must
// report each, at its level. A hardening warning alone does not fail Err.
func TestChecksCanFail(t *testing.T) {
	docs := sampleJSON(t)
	for _, tc := range sampleBreaks() {
		t.Run(tc.name, func(t *testing.T) {
			s := loadSample(t, docs)
			tc.break_(s)
			rep := Check(s.objs)
			t.Log(errors.Join(rep.Errors...), errors.Join(rep.Warnings...))
			checkFinding(t, tc.want, tc.level, rep.Errors, rep.Warnings)
		})
	}
}

// level is a finding's level, as the tests expect it.
type level string

const (
	errLevel  level = "error"   // in Errors: fails Err
	warnLevel level = "warning" // in Warnings, and nothing in Errors
)

// checkFinding requires a finding containing want among errs (errLevel) or
// among warns (warnLevel); a case at warnLevel breaks a hardening property
// only, so it must leave errs empty.
func checkFinding(t *testing.T, want string, lvl level, errs, warns []error) {
	t.Helper()
	has := func(list []error) bool {
		return slices.ContainsFunc(list, func(e error) bool { return strings.Contains(e.Error(), want) })
	}
	switch {
	case lvl == errLevel && !has(errs) && has(warns):
		t.Errorf("want an error containing %q, got it as a warning", want)
	case lvl == warnLevel && !has(warns) && has(errs):
		t.Errorf("want a warning containing %q, got it as an error", want)
	case lvl == errLevel && !has(errs), lvl == warnLevel && !has(warns):
		t.Errorf("want a %s containing %q, got:\nerrors:\n%v\nwarnings:\n%v", lvl, want, errors.Join(errs...), errors.Join(warns...))
	case lvl == warnLevel && len(errs) > 0:
		t.Errorf("a hardening warning alone must not fail Err, got errors:\n%v", errors.Join(errs...))
	}
}

// TestRedisURLForms: FENCE_REDIS_URL reaches the sample's Redis in every
// spelling of its DNS name, and a host outside the objects is left alone.
func TestRedisURLForms(t *testing.T) {
	docs := sampleJSON(t)
	for host, want := range map[string]string{
		"redis-0.redis":                                     "StatefulSet/fenceproxy-sample/redis",
		"redis-0.redis.fenceproxy-sample":                   "StatefulSet/fenceproxy-sample/redis",
		"redis-0.redis.fenceproxy-sample.svc.cluster.local": "StatefulSet/fenceproxy-sample/redis",
		"redis":                             "StatefulSet/fenceproxy-sample/redis",
		"redis.fenceproxy-sample.svc":       "StatefulSet/fenceproxy-sample/redis",
		"redis.other-namespace.svc":         "",
		"redis.example.com":                 "",
		"redis-7.redis-cluster.example.com": "",
	} {
		t.Run(host, func(t *testing.T) {
			s := loadSample(t, docs)
			s.env.Data["FENCE_REDIS_URL"] = "redis://" + host + ":6379/0"
			rep := Check(s.objs)
			if err := rep.Err(); err != nil {
				t.Fatal(err)
			}
			if got := rep.Fenced[0].Redis; got != want {
				t.Errorf("reaches %q, want %q", got, want)
			}
		})
	}
}

package deploy

import (
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

// sampleJSON renders the sample app once; sampleObjects decodes a fresh copy
// of it for each test to change.
func sampleJSON(t *testing.T) [][]byte {
	t.Helper()
	m, err := Build(sampleDir)
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
func (s *sample) without(kind, name string) {
	s.objs = slices.DeleteFunc(s.objs, func(o Object) bool { return o.GVK.Kind == kind && o.Name == name })
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

// TestChecksCanFail breaks the sample app one property at a time: Check must
// report each.
func TestChecksCanFail(t *testing.T) {
	docs := sampleJSON(t)
	setEnv := func(s *sample, k, v string) { s.env.Data[k] = v }
	cases := []struct {
		name   string
		break_ func(s *sample)
		want   string
	}{
		// The native sidecar.
		{"sidecar without restartPolicy", func(s *sample) { s.sidecar.RestartPolicy = nil }, "restartPolicy must be Always"},
		{"sidecar as a regular container", func(s *sample) {
			pod := &s.app.Spec.Template.Spec
			pod.Containers = append(pod.Containers, *s.sidecar)
			pod.InitContainers = nil
		}, "is a regular container"},
		// Probes.
		{"liveness on /readyz", func(s *sample) { s.sidecar.LivenessProbe.HTTPGet.Path = "/readyz" }, `livenessProbe.httpGet.path is "/readyz"`},
		{"readiness on /healthz", func(s *sample) { s.sidecar.ReadinessProbe.HTTPGet.Path = "/healthz" }, `readinessProbe.httpGet.path is "/healthz"`},
		{"readiness on the data port", func(s *sample) { s.sidecar.ReadinessProbe.HTTPGet.Port = intstr.FromString(DataPortName) }, "readinessProbe.httpGet.port"},
		{"liveness on a number that is not admin", func(s *sample) { s.sidecar.LivenessProbe.HTTPGet.Port = intstr.FromInt32(9091) }, "livenessProbe.httpGet.port"},
		{"no readiness", func(s *sample) { s.sidecar.ReadinessProbe = nil }, "readinessProbe is missing"},
		{"startup by exec", func(s *sample) {
			s.sidecar.StartupProbe.HTTPGet = nil
			s.sidecar.StartupProbe.Exec = &corev1.ExecAction{Command: []string{"true"}}
		}, "startupProbe must be an httpGet"},
		// Ports against the configuration fenceproxy loads.
		{"admin container port drifts", func(s *sample) { s.sidecar.Ports[1].ContainerPort = 9091 }, `FENCE_ADMIN_ADDR ":9090" does not match`},
		{"listen address drifts", func(s *sample) { setEnv(s, "FENCE_LISTEN_ADDR", ":8081") }, `FENCE_LISTEN_ADDR ":8081" does not match`},
		{"sidecar on loopback", func(s *sample) { setEnv(s, "FENCE_LISTEN_ADDR", "127.0.0.1:8080") }, "must listen on every interface"},
		{"data port renamed", func(s *sample) { s.sidecar.Ports[0].Name = "http" }, "no container port named fenced-http"},
		// config.Load and the routes file.
		{"bad env value", func(s *sample) { setEnv(s, "FENCE_STORE_TIMEOUT", "soon") }, "FENCE_STORE_TIMEOUT"},
		{"env ConfigMap missing", func(s *sample) { s.without("ConfigMap", s.env.Name) }, "envFrom ConfigMap"},
		{"routes with an unknown key", func(s *sample) {
			s.routes.Data["routes.yaml"] = strings.Replace(s.routes.Data["routes.yaml"], "compare:", "comparison:", 1)
		}, "comparison"},
		{"routes with a param the path lacks", func(s *sample) {
			s.routes.Data["routes.yaml"] = strings.Replace(s.routes.Data["routes.yaml"], "resource: orders/{orderID}", "resource: orders/{id}", 1)
		}, "FENCE_ROUTES_FILE"},
		{"routes file elsewhere", func(s *sample) { setEnv(s, "FENCE_ROUTES_FILE", "/etc/other/routes.yaml") }, "no volume is mounted there"},
		{"routes file misnamed", func(s *sample) { setEnv(s, "FENCE_ROUTES_FILE", "/etc/fenceproxy/routes.yml") }, `has no file "routes.yml"`},
		{"routes not mounted", func(s *sample) { s.sidecar.VolumeMounts = nil }, "no volume is mounted there"},
		// The app behind the sidecar.
		{"upstream not on loopback", func(s *sample) { setEnv(s, "FENCE_UPSTREAM_URL", "http://sample-app:5678") }, "must be the app on the pod's loopback"},
		{"app on every interface", func(s *sample) { s.appC.Args[0] = "-listen=:5678" }, `listens on ":5678"`},
		{"app on the pod IP", func(s *sample) { s.appC.Args[0] = "-listen=0.0.0.0:5678" }, `listens on "0.0.0.0:5678"`},
		{"app listen address implicit", func(s *sample) { s.appC.Args = s.appC.Args[1:] }, "make the loopback address explicit"},
		{"app declares its port", func(s *sample) {
			s.appC.Ports = []corev1.ContainerPort{{Name: "app", ContainerPort: 5678}}
		}, "declares port 5678"},
		{"upstream is the sidecar", func(s *sample) { setEnv(s, "FENCE_UPSTREAM_URL", "http://127.0.0.1:8080") }, "is the sidecar's own port"},
		// The Service.
		{"Service targets the app port", func(s *sample) { s.svc.Spec.Ports[0].TargetPort = intstr.FromInt32(5678) }, "not a port of the sidecar"},
		{"Service targets an app port name", func(s *sample) { s.svc.Spec.Ports[0].TargetPort = intstr.FromString("http") }, "not a port of the sidecar"},
		{"Service targetPort defaults to port", func(s *sample) {
			s.svc.Spec.Ports[0].TargetPort = intstr.IntOrString{}
			s.svc.Spec.Ports[0].Port = 5678
		}, "not a port of the sidecar"},
		// NetworkPolicies.
		{"policy rule without ports", func(s *sample) { s.policy.Spec.Ingress[0].Ports = nil }, "admits every port"},
		{"policy admits the app port", func(s *sample) { s.policy.Spec.Ingress[0].Ports[0].Port = ptr.To(intstr.FromInt32(5678)) }, "admits port 5678"},
		{"policy admits a range", func(s *sample) { s.policy.Spec.Ingress[0].Ports[0].EndPort = ptr.To[int32](9000) }, "port range"},
		{"admin port open to all", func(s *sample) { s.policy.Spec.Ingress[1].From = nil }, "admin port 9090 from everyone"},
		{"no policy", func(s *sample) { s.without("NetworkPolicy", "sample-app-ingress") }, "no NetworkPolicy restricts ingress"},
		{"policy selects other pods", func(s *sample) {
			s.policy.Spec.PodSelector.MatchLabels = map[string]string{"app.kubernetes.io/name": "other"}
		}, "no NetworkPolicy restricts ingress"},
		{"egress-only policy", func(s *sample) {
			s.policy.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
		}, "no NetworkPolicy restricts ingress"},
		{"another policy admits all", func(s *sample) {
			np := s.policy.DeepCopy()
			np.Name = "allow-all"
			np.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{}}
			s.objs = append(s.objs, Object{GVK: networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"), Namespace: np.Namespace, Name: np.Name, Obj: np})
		}, "NetworkPolicy allow-all ingress[0] admits every port"},
		// Security context, resources, host access, images.
		{"sidecar writable root", func(s *sample) { s.sidecar.SecurityContext.ReadOnlyRootFilesystem = ptr.To(false) }, "container fenceproxy: securityContext.readOnlyRootFilesystem"},
		{"sidecar may be root", func(s *sample) {
			s.sidecar.SecurityContext.RunAsNonRoot = nil
			s.app.Spec.Template.Spec.SecurityContext.RunAsNonRoot = nil
		}, "container fenceproxy: securityContext.runAsNonRoot"},
		{"sidecar as uid 0", func(s *sample) { s.sidecar.SecurityContext.RunAsUser = ptr.To[int64](0) }, "numeric non-root user"},
		{"sidecar as another uid", func(s *sample) { s.sidecar.SecurityContext.RunAsUser = ptr.To[int64](1000) }, "runAsUser must be 65532"},
		{"sidecar escalates", func(s *sample) { s.sidecar.SecurityContext.AllowPrivilegeEscalation = nil }, "container fenceproxy: securityContext.allowPrivilegeEscalation"},
		{"sidecar privileged", func(s *sample) { s.sidecar.SecurityContext.Privileged = ptr.To(true) }, "privileged must not be true"},
		{"sidecar keeps capabilities", func(s *sample) { s.sidecar.SecurityContext.Capabilities.Drop = nil }, "capabilities.drop must contain ALL"},
		{"sidecar adds a capability", func(s *sample) {
			s.sidecar.SecurityContext.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
		}, "capabilities.add must be empty"},
		{"no seccomp", func(s *sample) {
			s.sidecar.SecurityContext.SeccompProfile = nil
			s.app.Spec.Template.Spec.SecurityContext.SeccompProfile = nil
		}, "container fenceproxy: securityContext.seccompProfile"},
		{"unconfined seccomp", func(s *sample) {
			s.sidecar.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined
		}, "container fenceproxy: securityContext.seccompProfile"},
		{"app writable root", func(s *sample) { s.appC.SecurityContext.ReadOnlyRootFilesystem = nil }, "container app: securityContext.readOnlyRootFilesystem"},
		{"redis escalates", func(s *sample) { s.redisC.SecurityContext.AllowPrivilegeEscalation = ptr.To(true) }, "container redis: securityContext.allowPrivilegeEscalation"},
		{"sidecar without limits", func(s *sample) { s.sidecar.Resources.Limits = nil }, "container fenceproxy: resources.limits.cpu must be set"},
		{"sidecar without memory request", func(s *sample) { delete(s.sidecar.Resources.Requests, corev1.ResourceMemory) }, "container fenceproxy: resources.requests.memory must be set"},
		{"request above limit", func(s *sample) { s.sidecar.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("2") }, "exceeds the limit"},
		{"host network", func(s *sample) { s.app.Spec.Template.Spec.HostNetwork = true }, "hostNetwork"},
		{"host PID", func(s *sample) { s.app.Spec.Template.Spec.HostPID = true }, "hostPID/hostIPC must be false"},
		{"host port", func(s *sample) { s.sidecar.Ports[0].HostPort = 8080 }, "hostPort 8080"},
		{"latest image", func(s *sample) { s.appC.Image = "docker.io/hashicorp/http-echo:latest" }, "explicit tag"},
		{"untagged sidecar image", func(s *sample) { s.sidecar.Image = "fenceproxy" }, "explicit tag"},
		// Shutdown.
		{"grace below the drain", func(s *sample) { s.app.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](25) }, "terminationGracePeriodSeconds 25s"},
		{"drain above the grace", func(s *sample) { setEnv(s, "FENCE_SHUTDOWN_TIMEOUT", "40s") }, "FENCE_SHUTDOWN_TIMEOUT (40s)"},
		{"default grace", func(s *sample) { s.app.Spec.Template.Spec.TerminationGracePeriodSeconds = nil }, "terminationGracePeriodSeconds 30s"},
		// Metrics.
		{"scrape the data port", func(s *sample) { s.app.Spec.Template.Annotations["prometheus.io/port"] = "8080" }, "prometheus.io/port=9090"},
		{"no scrape annotations", func(s *sample) { s.app.Spec.Template.Annotations = nil }, "prometheus.io/scrape=true"},
		// The store.
		{"memory store", func(s *sample) { setEnv(s, "FENCE_STORE", "memory"); delete(s.env.Data, "FENCE_REDIS_URL") }, "memory forgets"},
		{"bolt with replicas", func(s *sample) { setEnv(s, "FENCE_STORE", "bolt"); delete(s.env.Data, "FENCE_REDIS_URL") }, "keeps marks per pod"},
		{"bolt on the read-only root", func(s *sample) {
			setEnv(s, "FENCE_STORE", "bolt")
			delete(s.env.Data, "FENCE_REDIS_URL")
			s.app.Spec.Replicas = ptr.To[int32](1)
		}, "FENCE_BOLT_PATH \"fenceproxy.db\" must be on a writable persistent volume"},
		{"redis URL wrong port", func(s *sample) { setEnv(s, "FENCE_REDIS_URL", "redis://redis-0.redis:6380/0") }, "port 6380 is not a port of Service redis"},
		{"redis URL spreads over replicas", func(s *sample) {
			setEnv(s, "FENCE_REDIS_URL", "redis://redis:6379/0")
			s.redis.Spec.Replicas = ptr.To[int32](3)
		}, "spreads connections over 3 Redis pods"},
		{"redis URL at the app", func(s *sample) { setEnv(s, "FENCE_REDIS_URL", "redis://sample-app:80/0") }, "runs no redis-server"},
		{"redis appendfsync everysec", func(s *sample) {
			s.redisCM.Data["redis.conf"] = strings.Replace(s.redisCM.Data["redis.conf"], "appendfsync always", "appendfsync everysec", 1)
		}, `appendfsync is "everysec"`},
		{"redis without AOF", func(s *sample) {
			s.redisCM.Data["redis.conf"] = strings.Replace(s.redisCM.Data["redis.conf"], "appendonly yes", "", 1)
		}, `appendonly is ""`},
		{"redis evicts", func(s *sample) {
			s.redisCM.Data["redis.conf"] += "maxmemory-policy allkeys-lru\n"
		}, `maxmemory-policy is "allkeys-lru"`},
		{"redis args override the file", func(s *sample) { s.redisC.Args = append(s.redisC.Args, "--appendonly", "no") }, `appendonly is "no"`},
		{"redis config not mounted", func(s *sample) { s.redisC.VolumeMounts = s.redisC.VolumeMounts[:1] }, "config file /etc/redis/redis.conf"},
		{"redis without a PVC", func(s *sample) { s.redis.Spec.VolumeClaimTemplates = nil }, "volumeClaimTemplates"},
		{"redis dir off the volume", func(s *sample) {
			s.redisCM.Data["redis.conf"] = strings.Replace(s.redisCM.Data["redis.conf"], "dir /data", "dir /tmp", 1)
		}, `Redis dir "/tmp" is not on a persistent volume`},
		{"redis without its governing Service", func(s *sample) { s.without("Service", "redis") }, `governing Service "redis"`},
		{"redis service selects other pods", func(s *sample) {
			s.redisSv.Spec.Selector = map[string]string{"app.kubernetes.io/name": "other"}
		}, "does not select the Redis pods"},
		{"redis service not headless", func(s *sample) {
			s.redisSv.Spec.ClusterIP = ""
		}, "must be headless"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := loadSample(t, docs)
			tc.break_(s)
			err := Check(s.objs).Err()
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want a problem containing %q, got:\n%v", tc.want, err)
			}
		})
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

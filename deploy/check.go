package deploy

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/proxy"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The names the manifests and these checks agree on.
const (
	// SidecarName is the name of the fenceproxy container.
	SidecarName = "fenceproxy"
	// DataPortName is the sidecar's data-plane port (FENCE_LISTEN_ADDR), the
	// only port a Service or NetworkPolicy may admit to a fenced pod.
	DataPortName = "fenced-http"
	// AdminPortName is the sidecar's admin port (FENCE_ADMIN_ADDR):
	// /healthz, /readyz, /metrics.
	AdminPortName = "fence-admin"
	// SidecarUID is the image's USER (distroless nonroot).
	SidecarUID = 65532
	// GraceMargin is what terminationGracePeriodSeconds must leave beyond the
	// app's preStop sleeps plus FENCE_SHUTDOWN_TIMEOUT.
	GraceMargin = 5 * time.Second
)

// Report is what Check found: every problem, and facts about each fenced
// workload that a caller may require (a Service, a NetworkPolicy, Redis).
type Report struct {
	Problems []error
	Fenced   []Fenced
}

// Fenced describes one workload with the fenceproxy sidecar.
type Fenced struct {
	Workload        string         // Kind/namespace/name
	Config          *config.Config // the sidecar's configuration as config.Load read it; nil if it failed
	Services        []string       // Services selecting the pods
	NetworkPolicies []string       // NetworkPolicies restricting ingress to the pods
	Redis           string         // the StatefulSet FENCE_REDIS_URL reaches, "" if not among the objects
}

// Err joins the problems (nil when there are none).
func (r Report) Err() error { return errors.Join(r.Problems...) }

// workload is a Deployment or StatefulSet, reduced to what the checks read.
type workload struct {
	obj         Object
	ns          string
	replicas    int32
	meta        *metav1.ObjectMeta // of the pod template
	spec        *corev1.PodSpec
	claims      []corev1.PersistentVolumeClaim // StatefulSet volumeClaimTemplates
	serviceName string                         // StatefulSet spec.serviceName
}

type index struct {
	configMaps map[string]*corev1.ConfigMap // by namespace/name
	secrets    map[string]*corev1.Secret
	services   []*corev1.Service
	policies   []*networkingv1.NetworkPolicy
	workloads  []workload
}

func key(ns, name string) string { return ns + "/" + name }

func newIndex(objs []Object) *index {
	idx := &index{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *corev1.ConfigMap:
			idx.configMaps[key(v.Namespace, v.Name)] = v
		case *corev1.Secret:
			idx.secrets[key(v.Namespace, v.Name)] = v
		case *corev1.Service:
			idx.services = append(idx.services, v)
		case *networkingv1.NetworkPolicy:
			idx.policies = append(idx.policies, v)
		case *appsv1.Deployment:
			idx.workloads = append(idx.workloads, workload{obj: o, ns: v.Namespace, replicas: replicas(v.Spec.Replicas),
				meta: &v.Spec.Template.ObjectMeta, spec: &v.Spec.Template.Spec})
		case *appsv1.StatefulSet:
			idx.workloads = append(idx.workloads, workload{obj: o, ns: v.Namespace, replicas: replicas(v.Spec.Replicas),
				meta: &v.Spec.Template.ObjectMeta, spec: &v.Spec.Template.Spec,
				claims: v.Spec.VolumeClaimTemplates, serviceName: v.Spec.ServiceName})
		}
	}
	return idx
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// problems collects the problems of one object, each prefixed with its name.
type problems struct {
	prefix string
	errs   *[]error
}

func (p problems) add(format string, args ...any) {
	*p.errs = append(*p.errs, fmt.Errorf("%s: %s", p.prefix, fmt.Sprintf(format, args...)))
}

func (p problems) sub(prefix string) problems {
	return problems{prefix: p.prefix + ": " + prefix, errs: p.errs}
}

// Check asserts fenceproxy's requirements on rendered objects (see the
// package doc). Every workload's containers must be locked down; a workload
// with the fenceproxy sidecar must be wired so that nothing reaches its app
// but through the sidecar, with a configuration fenceproxy accepts; a Redis
// StatefulSet must keep what it is told.
func Check(objs []Object) Report {
	var errs []error
	var rep Report
	idx := newIndex(objs)
	for _, w := range idx.workloads {
		p := problems{prefix: w.obj.String(), errs: &errs}
		checkPod(p, w)
		if isRedis(w) {
			checkRedis(p, idx, w)
		}
		var sidecar *corev1.Container
		for i := range w.spec.Containers {
			if w.spec.Containers[i].Name == SidecarName {
				p.add("container %s is a regular container: it must be an init container with restartPolicy Always (a native sidecar), so that it starts before the app and stops after it", SidecarName)
			}
		}
		for i := range w.spec.InitContainers {
			if w.spec.InitContainers[i].Name == SidecarName {
				sidecar = &w.spec.InitContainers[i]
			}
		}
		if sidecar == nil {
			continue
		}
		f := checkFenced(p, idx, w, sidecar)
		rep.Fenced = append(rep.Fenced, f)
	}
	rep.Problems = errs
	return rep
}

// checkPod checks what every pod and container must satisfy.
func checkPod(p problems, w workload) {
	s := w.spec
	if s.HostNetwork {
		p.add("hostNetwork: the pod's ports would be the node's, past every NetworkPolicy")
	}
	if s.HostPID || s.HostIPC {
		p.add("hostPID/hostIPC must be false")
	}
	for _, c := range allContainers(s) {
		checkContainer(p.sub("container "+c.Name), s, c)
	}
}

func allContainers(s *corev1.PodSpec) []*corev1.Container {
	var cs []*corev1.Container
	for i := range s.InitContainers {
		cs = append(cs, &s.InitContainers[i])
	}
	for i := range s.Containers {
		cs = append(cs, &s.Containers[i])
	}
	return cs
}

// checkContainer checks the security context (the container's, falling back
// to the pod's where Kubernetes does), resources, host ports and the image.
func checkContainer(p problems, pod *corev1.PodSpec, c *corev1.Container) {
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	sc := c.SecurityContext
	if sc == nil {
		sc = &corev1.SecurityContext{}
	}
	if v := firstBool(sc.RunAsNonRoot, psc.RunAsNonRoot); v == nil || !*v {
		p.add("securityContext.runAsNonRoot must be true")
	}
	if uid := runAsUser(pod, c); uid == nil || *uid == 0 {
		p.add("securityContext.runAsUser must be a numeric non-root user")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		p.add("securityContext.readOnlyRootFilesystem must be true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		p.add("securityContext.allowPrivilegeEscalation must be false")
	}
	if sc.Privileged != nil && *sc.Privileged {
		p.add("securityContext.privileged must not be true")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		p.add("securityContext.capabilities.drop must contain ALL")
	} else if len(sc.Capabilities.Add) > 0 {
		p.add("securityContext.capabilities.add must be empty, not %v", sc.Capabilities.Add)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
		p.add("securityContext.seccompProfile.type must be RuntimeDefault (or Localhost)")
	}

	for _, kind := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := c.Resources.Requests[kind]
		lim, okLim := c.Resources.Limits[kind]
		switch {
		case !okReq || req.IsZero():
			p.add("resources.requests.%s must be set", kind)
		case !okLim || lim.IsZero():
			p.add("resources.limits.%s must be set", kind)
		case req.Cmp(lim) > 0:
			p.add("resources.requests.%s %s exceeds the limit %s", kind, req.String(), lim.String())
		}
	}

	for _, port := range c.Ports {
		if port.HostPort != 0 {
			p.add("port %d has hostPort %d: the node's port would skip every NetworkPolicy", port.ContainerPort, port.HostPort)
		}
	}
	checkImage(p, c.Image)
}

// checkImage requires an explicit tag or digest other than latest.
func checkImage(p problems, image string) {
	if strings.Contains(image, "@sha256:") {
		return
	}
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	if !ok || tag == "" || tag == "latest" {
		p.add("image %q needs an explicit tag (not latest) or a digest", image)
	}
}

func firstBool(vs ...*bool) *bool {
	for _, v := range vs {
		if v != nil {
			return v
		}
	}
	return nil
}

func runAsUser(pod *corev1.PodSpec, c *corev1.Container) *int64 {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return c.SecurityContext.RunAsUser
	}
	if pod.SecurityContext != nil {
		return pod.SecurityContext.RunAsUser
	}
	return nil
}

// checkFenced checks a workload with the fenceproxy sidecar c. Problems of
// the pod are reported with wp, those of the sidecar container with p.
func checkFenced(wp problems, idx *index, w workload, c *corev1.Container) Fenced {
	f := Fenced{Workload: w.obj.String()}
	p := wp.sub("container " + c.Name)
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		p.add("restartPolicy must be Always (a native sidecar); without it the pod waits for it to exit before starting the app")
	}
	if uid := runAsUser(w.spec, c); uid == nil || *uid != SidecarUID {
		p.add("securityContext.runAsUser must be %d, the image's USER", SidecarUID)
	}

	dataPort, adminPort := namedPort(p, c, DataPortName), namedPort(p, c, AdminPortName)

	env := resolveEnv(p, idx, w, c)
	cfg, err := loadConfig(p, idx, w, c, env)
	if err != nil {
		p.add("the environment and routes file fail fenceproxy's config.Load / route check:\n%v", err)
	}
	f.Config = cfg
	checkTokenKeys(p, idx, w, c, env)

	// Probes: on the admin port, the paths fenceproxy serves.
	checkProbe(p, "livenessProbe", c, c.LivenessProbe, "/healthz", adminPort, true)
	checkProbe(p, "readinessProbe", c, c.ReadinessProbe, "/readyz", adminPort, true)
	checkProbe(p, "startupProbe", c, c.StartupProbe, "/healthz", adminPort, false)

	// Prometheus scrapes the admin port.
	ann := w.meta.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" ||
		ann["prometheus.io/port"] != strconv.Itoa(int(adminPort)) {
		wp.add("pod template annotations must be prometheus.io/scrape=true, prometheus.io/port=%d (%s), prometheus.io/path=/metrics; have %v",
			adminPort, AdminPortName, promAnnotations(ann))
	}

	var upstreamPort int32
	if cfg != nil {
		checkListen(p, "FENCE_LISTEN_ADDR", cfg.ListenAddr, dataPort, DataPortName)
		checkListen(p, "FENCE_ADMIN_ADDR", cfg.AdminAddr, adminPort, AdminPortName)
		upstreamPort = checkUpstream(p, cfg, c)
		checkGrace(wp, w, cfg)
		f.Redis = checkStore(p, idx, w, c, cfg)
	}
	f.Services, f.NetworkPolicies = checkExposure(wp, idx, w, c, upstreamPort)
	return f
}

func promAnnotations(ann map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range ann {
		if strings.HasPrefix(k, "prometheus.io/") {
			m[k] = v
		}
	}
	return m
}

// namedPort returns the TCP container port of c named name.
func namedPort(p problems, c *corev1.Container, name string) int32 {
	for _, port := range c.Ports {
		if port.Name == name {
			if port.Protocol != "" && port.Protocol != corev1.ProtocolTCP {
				p.add("port %s must be TCP", name)
			}
			return port.ContainerPort
		}
	}
	p.add("no container port named %s", name)
	return 0
}

// resolvePort turns a probe's or Service's port (a number or a name) into a
// number using the ports of c; 0 if the name is not among them.
func resolvePort(c *corev1.Container, port intstr.IntOrString) int32 {
	if port.Type == intstr.Int {
		return port.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == port.StrVal {
			return cp.ContainerPort
		}
	}
	return 0
}

func checkProbe(p problems, field string, c *corev1.Container, pr *corev1.Probe, path string, adminPort int32, required bool) {
	if pr == nil {
		if required {
			p.add("%s is missing (httpGet %s on %s)", field, path, AdminPortName)
		}
		return
	}
	g := pr.HTTPGet
	if g == nil {
		p.add("%s must be an httpGet (the image has no shell for exec)", field)
		return
	}
	if g.Path != path {
		p.add("%s.httpGet.path is %q, want %q", field, g.Path, path)
	}
	if got := resolvePort(c, g.Port); got == 0 || got != adminPort {
		p.add("%s.httpGet.port %s is not the admin port %s (%d)", field, g.Port.String(), AdminPortName, adminPort)
	}
	if g.Host != "" {
		p.add("%s.httpGet.host must be empty (the pod IP)", field)
	}
}

// checkListen compares a listen address of the configuration with the
// container port it is published as.
func checkListen(p problems, variable, addr string, containerPort int32, portName string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		p.add("%s %q: %v", variable, addr, err)
		return
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		p.add("%s %q must listen on every interface: the kubelet and the Service reach the pod IP", variable, addr)
	}
	if port != strconv.Itoa(int(containerPort)) {
		p.add("%s %q does not match the container port %s (%d)", variable, addr, portName, containerPort)
	}
}

// checkUpstream requires the upstream on the pod's loopback and returns its
// port.
func checkUpstream(p problems, cfg *config.Config, c *corev1.Container) int32 {
	u := cfg.UpstreamURL
	if !isLoopback(u.Hostname()) {
		p.add("FENCE_UPSTREAM_URL %q must be the app on the pod's loopback (127.0.0.1): anything else is reachable without the sidecar", u.Redacted())
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	n, _ := strconv.Atoi(port)
	for _, cp := range c.Ports {
		if cp.ContainerPort == int32(n) {
			p.add("FENCE_UPSTREAM_URL port %d is the sidecar's own port %s", n, cp.Name)
		}
	}
	return int32(n)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkGrace requires a termination grace period that covers the app's
// preStop sleeps and fenceproxy's drain: with native sidecars the app
// containers stop first, the sidecar after them, in one grace period.
func checkGrace(p problems, w workload, cfg *config.Config) {
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if w.spec.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*w.spec.TerminationGracePeriodSeconds) * time.Second
	}
	var sleeps time.Duration
	for _, c := range w.spec.Containers {
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			sleeps += time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
	}
	if need := sleeps + cfg.ShutdownTimeout + GraceMargin; grace < need {
		p.add("terminationGracePeriodSeconds %v is below the app's preStop sleeps (%v) + FENCE_SHUTDOWN_TIMEOUT (%v) + %v",
			grace, sleeps, cfg.ShutdownTimeout, GraceMargin)
	}
}

// resolveEnv builds the sidecar's environment as the kubelet would: envFrom
// in order, then env, later entries winning. FENCE_* values it cannot resolve
// from the objects are problems.
func resolveEnv(p problems, idx *index, w workload, c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, src := range c.EnvFrom {
		switch {
		case src.ConfigMapRef != nil:
			cm := idx.configMaps[key(w.ns, src.ConfigMapRef.Name)]
			if cm == nil {
				if src.ConfigMapRef.Optional == nil || !*src.ConfigMapRef.Optional {
					p.add("envFrom ConfigMap %q is not among the objects", src.ConfigMapRef.Name)
				}
				continue
			}
			for k, v := range cm.Data {
				env[src.Prefix+k] = v
			}
		case src.SecretRef != nil:
			s := idx.secrets[key(w.ns, src.SecretRef.Name)]
			if s == nil {
				p.add("envFrom Secret %q is not among the objects: its FENCE_* values cannot be checked", src.SecretRef.Name)
				continue
			}
			for k, v := range secretData(s) {
				env[src.Prefix+k] = v
			}
		}
	}
	for _, e := range c.Env {
		if strings.Contains(e.Value, "$(") {
			p.add("env %s: $(VAR) references are not checked; spell the value out", e.Name)
		}
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			if cm := idx.configMaps[key(w.ns, ref.Name)]; cm != nil {
				if v, ok := cm.Data[ref.Key]; ok {
					env[e.Name] = v
					continue
				}
			}
			p.add("env %s: ConfigMap %s key %s is not among the objects", e.Name, ref.Name, ref.Key)
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if s := idx.secrets[key(w.ns, ref.Name)]; s != nil {
				if v, ok := secretData(s)[ref.Key]; ok {
					env[e.Name] = v
					continue
				}
			}
			if strings.HasPrefix(e.Name, "FENCE_") {
				p.add("env %s: Secret %s key %s is not among the objects: the value cannot be checked", e.Name, ref.Name, ref.Key)
			}
		default:
			if strings.HasPrefix(e.Name, "FENCE_") {
				p.add("env %s: only values, ConfigMap and Secret keys can be checked", e.Name)
			}
		}
	}
	return env
}

func secretData(s *corev1.Secret) map[string]string {
	m := map[string]string{}
	for k, v := range s.Data {
		m[k] = string(v)
	}
	for k, v := range s.StringData {
		m[k] = v
	}
	return m
}

// loadConfig runs fenceproxy's own config.Load and route check on env. The
// files the environment names (FENCE_*_FILE) are read from the ConfigMap or
// Secret mounted at that path and handed to Load as temporary files.
func loadConfig(p problems, idx *index, w workload, c *corev1.Container, env map[string]string) (*config.Config, error) {
	dir, err := os.MkdirTemp("", "fenceproxy-deploy-check-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	env = maps.Clone(env)
	// Never the files of the machine running the check: a file that is not
	// mounted from the objects is one that does not exist.
	var renames []string
	for k, v := range env {
		if !strings.HasPrefix(k, "FENCE_") || !strings.HasSuffix(k, "_FILE") || v == "" {
			continue
		}
		tmp := filepath.Join(dir, strings.ToLower(k))
		renames = append(renames, tmp, v)
		env[k] = tmp
		data, err := mountedFile(idx, w, c, v)
		if err != nil {
			if k != TokenKeysVar { // checkTokenKeys reports it
				p.add("%s %q: %v", k, v, err)
			}
			continue
		}
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return nil, err
		}
	}
	// Messages name the paths in the pod, not the temporary files.
	pod := strings.NewReplacer(renames...)
	cfg, err := config.Load(env)
	if err != nil {
		return nil, errors.New(pod.Replace(err.Error()))
	}
	if err := proxy.CheckRoutes(cfg.Routes); err != nil {
		return nil, errors.New(pod.Replace(err.Error()))
	}
	return cfg, nil
}

// mountedFile returns the content the container sees at file, from the
// ConfigMap or Secret volume mounted over it.
func mountedFile(idx *index, w workload, c *corev1.Container, file string) ([]byte, error) {
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if (file == m.MountPath || strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/")) &&
			(mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		return nil, errors.New("no volume is mounted there")
	}
	var vol *corev1.Volume
	for i := range w.spec.Volumes {
		if w.spec.Volumes[i].Name == mount.Name {
			vol = &w.spec.Volumes[i]
		}
	}
	if vol == nil {
		return nil, fmt.Errorf("volume %q is not in the pod", mount.Name)
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(file, mount.MountPath), "/")
	if mount.SubPath != "" {
		rel = path.Join(mount.SubPath, rel)
	}
	var items []corev1.KeyToPath
	var data map[string]string
	switch {
	case vol.ConfigMap != nil:
		cm := idx.configMaps[key(w.ns, vol.ConfigMap.Name)]
		if cm == nil {
			return nil, fmt.Errorf("ConfigMap %q is not among the objects", vol.ConfigMap.Name)
		}
		items, data = vol.ConfigMap.Items, cm.Data
	case vol.Secret != nil:
		s := idx.secrets[key(w.ns, vol.Secret.SecretName)]
		if s == nil {
			return nil, fmt.Errorf("Secret %q is not among the objects", vol.Secret.SecretName)
		}
		items, data = vol.Secret.Items, secretData(s)
	default:
		return nil, fmt.Errorf("volume %q is neither a ConfigMap nor a Secret", vol.Name)
	}
	k := rel
	if len(items) > 0 {
		k = ""
		for _, it := range items {
			if it.Path == rel {
				k = it.Key
			}
		}
	}
	v, ok := data[k]
	if !ok || k == "" {
		return nil, fmt.Errorf("volume %q has no file %q", vol.Name, rel)
	}
	return []byte(v), nil
}

// checkExposure checks every way into the pod: only the sidecar declares
// ports, the app listens on loopback, Services and NetworkPolicies admit
// only the sidecar's ports. It returns the Services and NetworkPolicies that
// select the pod.
func checkExposure(p problems, idx *index, w workload, sidecar *corev1.Container, upstreamPort int32) (services, policies []string) {
	podLabels := labels.Set(w.meta.Labels)
	sidecarPort := func(port intstr.IntOrString) bool {
		if port.Type == intstr.String {
			return slices.ContainsFunc(sidecar.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == port.StrVal })
		}
		return slices.ContainsFunc(sidecar.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == port.IntVal })
	}

	// Only the sidecar offers ports; the app listens on loopback, explicitly.
	listens := 0
	for _, c := range allContainers(w.spec) {
		if c == sidecar {
			continue
		}
		for _, cp := range c.Ports {
			p.add("container %s declares port %d: only the sidecar's ports may be declared (a Service could target it)", c.Name, cp.ContainerPort)
		}
		for _, a := range listenAddrs(c, upstreamPort) {
			host, _, _ := net.SplitHostPort(a)
			if !isLoopback(host) {
				p.add("container %s listens on %q: the app must listen on loopback only (127.0.0.1:%d)", c.Name, a, upstreamPort)
			}
			listens++
		}
	}
	if upstreamPort != 0 && listens == 0 {
		p.add("no app container's args or env name its listen address 127.0.0.1:%d: the app's default may be every interface; make the loopback address explicit", upstreamPort)
	}

	for _, svc := range idx.services {
		if svc.Namespace != w.ns || len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			continue
		}
		services = append(services, svc.Name)
		for _, sp := range svc.Spec.Ports {
			tp := sp.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(sp.Port) // targetPort defaults to port
			}
			if !sidecarPort(tp) || (tp.Type == intstr.Int && tp.IntVal == upstreamPort) {
				p.add("Service %s port %s targets %s, not a port of the sidecar: requests would skip the fence", svc.Name, sp.Name, tp.String())
			}
		}
	}

	for _, np := range idx.policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if np.Namespace != w.ns || err != nil || !sel.Matches(podLabels) {
			continue
		}
		if len(np.Spec.PolicyTypes) > 0 && !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			continue
		}
		policies = append(policies, np.Name)
		for i, rule := range np.Spec.Ingress {
			if len(rule.Ports) == 0 {
				p.add("NetworkPolicy %s ingress[%d] admits every port, the app's too: list the sidecar's ports", np.Name, i)
			}
			for _, port := range rule.Ports {
				switch {
				case port.Port == nil:
					p.add("NetworkPolicy %s ingress[%d] admits every port of its protocol", np.Name, i)
				case port.EndPort != nil:
					p.add("NetworkPolicy %s ingress[%d] admits a port range", np.Name, i)
				case !sidecarPort(*port.Port):
					p.add("NetworkPolicy %s ingress[%d] admits port %s, not a port of the sidecar", np.Name, i, port.Port.String())
				case resolvePort(sidecar, *port.Port) != resolvePort(sidecar, intstr.FromString(DataPortName)) && len(rule.From) == 0:
					p.add("NetworkPolicy %s ingress[%d] admits the admin port %s from everyone: restrict it to Prometheus", np.Name, i, port.Port.String())
				}
			}
		}
	}
	if len(policies) == 0 {
		p.add("no NetworkPolicy restricts ingress to the pods: any other port (the app's, should it listen beyond loopback) is open")
	}
	return services, policies
}

// listenAddrs returns the host:port values in c's command, args and env that
// name port, e.g. "-listen=127.0.0.1:5678" or LISTEN_ADDR=":5678".
func listenAddrs(c *corev1.Container, port int32) []string {
	var words []string
	words = append(words, c.Command...)
	words = append(words, c.Args...)
	for _, e := range c.Env {
		words = append(words, e.Value)
	}
	var addrs []string
	for _, w := range words {
		if _, v, ok := strings.Cut(w, "="); ok {
			w = v
		}
		for _, f := range strings.Fields(w) {
			if _, p, err := net.SplitHostPort(f); err == nil && p == strconv.Itoa(int(port)) {
				addrs = append(addrs, f)
			}
		}
	}
	return addrs
}

// checkStore checks that the sidecar's store keeps marks for all its pods.
// It returns the Redis StatefulSet FENCE_REDIS_URL reaches among the objects.
func checkStore(p problems, idx *index, w workload, c *corev1.Container, cfg *config.Config) string {
	switch cfg.Store {
	case config.StoreMemory:
		p.add("FENCE_STORE=memory forgets every mark on restart")
	case config.StoreBolt:
		if w.replicas > 1 {
			p.add("the bolt store keeps marks per pod: %d replicas need Redis (FENCE_REDIS_URL)", w.replicas)
		}
		if !onPersistentVolume(w, c, cfg.BoltPath) {
			p.add("FENCE_BOLT_PATH %q must be on a writable persistent volume (the root filesystem is read-only; an emptyDir dies with the pod)", cfg.BoltPath)
		}
	case config.StoreRedis:
		if cfg.Redis.URL != "" {
			return checkRedisURL(p, idx, w, cfg.Redis.URL)
		}
	}
	return ""
}

// onPersistentVolume reports whether file is on a writable mount of a
// PersistentVolumeClaim (a volume or a volumeClaimTemplate).
func onPersistentVolume(w workload, c *corev1.Container, file string) bool {
	if !filepath.IsAbs(file) {
		return false
	}
	for _, m := range c.VolumeMounts {
		if m.ReadOnly || !strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		for _, v := range w.spec.Volumes {
			if v.Name == m.Name && v.PersistentVolumeClaim != nil {
				return true
			}
		}
		for _, t := range w.claims {
			if t.Name == m.Name {
				return true
			}
		}
	}
	return false
}

// podOrdinal matches the first label of a StatefulSet pod's DNS name.
var podOrdinal = regexp.MustCompile(`^(.+)-([0-9]+)$`)

// checkRedisURL follows FENCE_REDIS_URL to a Service among the objects (the
// host is service, service.namespace[...], or pod.service[...] for a
// StatefulSet pod) and checks the Redis behind it. It returns that
// StatefulSet, or "" when the URL leads outside the objects.
func checkRedisURL(p problems, idx *index, w workload, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	find := func(name, ns string) *corev1.Service {
		for _, s := range idx.services {
			if s.Name == name && s.Namespace == ns {
				return s
			}
		}
		return nil
	}
	// service[.namespace[.svc...]], or pod.service[.namespace[.svc...]]
	// when the first label looks like a StatefulSet pod and the rest names
	// a Service among the objects.
	nsOf := func(rest []string) string {
		if len(rest) >= 1 && rest[0] != "svc" {
			return rest[0]
		}
		return w.ns
	}
	hl := strings.Split(u.Hostname(), ".")
	pod := ""
	svc := find(hl[0], nsOf(hl[1:]))
	if len(hl) >= 2 && podOrdinal.MatchString(hl[0]) {
		if s := find(hl[1], nsOf(hl[2:])); s != nil {
			pod, svc = hl[0], s
		}
	}
	if svc == nil {
		return ""
	}
	ns := svc.Namespace
	port := u.Port()
	if port == "" {
		port = "6379"
	}
	if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return strconv.Itoa(int(sp.Port)) == port }) {
		p.add("FENCE_REDIS_URL port %s is not a port of Service %s", port, svc.Name)
	}
	for _, rw := range idx.workloads {
		if rw.ns != ns || len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(rw.meta.Labels)) {
			continue
		}
		if !isRedis(rw) {
			p.add("FENCE_REDIS_URL reaches %s, which runs no redis-server", rw.obj)
			return rw.obj.String()
		}
		if pod == "" && rw.replicas > 1 {
			p.add("FENCE_REDIS_URL names Service %s, which spreads connections over %d Redis pods that do not share marks: name one pod (%s-0.%s) or use Sentinel", svc.Name, rw.replicas, rw.obj.Name, svc.Name)
		}
		if pod != "" && (rw.serviceName != svc.Name || !strings.HasPrefix(pod, rw.obj.Name+"-")) {
			p.add("FENCE_REDIS_URL host %s is not a pod of %s through its governing Service", u.Hostname(), rw.obj)
		}
		return rw.obj.String()
	}
	p.add("FENCE_REDIS_URL reaches Service %s, which selects no workload among the objects", svc.Name)
	return ""
}

// isRedis reports whether the workload runs redis-server.
func isRedis(w workload) bool {
	return redisContainer(w) != nil
}

func redisContainer(w workload) *corev1.Container {
	for i, c := range w.spec.Containers {
		words := append(slices.Clone(c.Command), c.Args...)
		if slices.ContainsFunc(words, func(s string) bool { return path.Base(s) == "redis-server" }) ||
			strings.Contains(path.Base(strings.SplitN(c.Image, ":", 2)[0]), "redis") && !strings.Contains(c.Image, "exporter") {
			return &w.spec.Containers[i]
		}
	}
	return nil
}

// RedisDurability is what Redis must be told to keep every mark it
// acknowledged: an fsync per write to the append-only file, no eviction.
var RedisDurability = map[string]string{
	"appendonly":       "yes",
	"appendfsync":      "always",
	"maxmemory-policy": "noeviction",
}

// checkRedis checks a Redis workload: its effective configuration (the
// config file, then command-line overrides) keeps marks, on a persistent
// volume, behind a headless Service.
func checkRedis(p problems, idx *index, w workload) {
	c := redisContainer(w)
	p = p.sub("container " + c.Name)
	conf := map[string]string{}
	words := append(slices.Clone(c.Command), c.Args...)
	var flags []string
	for i, word := range words {
		if strings.HasSuffix(word, ".conf") {
			data, err := mountedFile(idx, w, c, word)
			if err != nil {
				p.add("config file %s: %v", word, err)
			}
			parseRedisConf(conf, string(data))
			flags = words[i+1:]
			break
		}
		if strings.HasPrefix(word, "--") {
			flags = words[i:]
			break
		}
	}
	parseRedisFlags(conf, flags)
	for k, want := range RedisDurability {
		if got := conf[k]; got != want {
			p.add("Redis %s is %q, want %q (marks must survive a crash and never be evicted)", k, got, want)
		}
	}
	dir := conf["dir"]
	if dir == "" {
		p.add("Redis dir is not set: the append-only file must go to the persistent volume")
	} else if !onPersistentVolume(w, c, dir+"/appendonlydir") {
		p.add("Redis dir %q is not on a persistent volume (a volumeClaimTemplate or a PersistentVolumeClaim)", dir)
	}
	if w.obj.GVK.Kind != "StatefulSet" || len(w.claims) == 0 {
		p.add("Redis must be a StatefulSet with volumeClaimTemplates, so its data outlives the pod")
	}
	if w.obj.GVK.Kind == "StatefulSet" {
		var svc *corev1.Service
		for _, s := range idx.services {
			if s.Namespace == w.ns && s.Name == w.serviceName {
				svc = s
			}
		}
		switch {
		case svc == nil:
			p.add("the governing Service %q (spec.serviceName) is not among the objects", w.serviceName)
		case svc.Spec.ClusterIP != corev1.ClusterIPNone:
			p.add("the governing Service %s must be headless (clusterIP: None)", svc.Name)
		case len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.meta.Labels)):
			p.add("the governing Service %s does not select the Redis pods", svc.Name)
		}
	}
}

// parseRedisConf reads redis.conf directives ("name value...") into conf,
// later ones winning, names in lower case.
func parseRedisConf(conf map[string]string, text string) {
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		conf[strings.ToLower(f[0])] = unquote(strings.Join(f[1:], " "))
	}
}

// parseRedisFlags reads redis-server's "--name value..." arguments.
func parseRedisFlags(conf map[string]string, words []string) {
	name := ""
	var vals []string
	flush := func() {
		if name != "" {
			conf[name] = unquote(strings.Join(vals, " "))
		}
	}
	for _, w := range words {
		if strings.HasPrefix(w, "--") {
			flush()
			name, vals = strings.ToLower(strings.TrimPrefix(w, "--")), nil
			continue
		}
		vals = append(vals, w)
	}
	flush()
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}

package deploy

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// checkPod checks what every pod and container must satisfy.
func checkPod(p problems, w workload) {
	s := w.spec
	if s.HostNetwork {
		p.add("spec.template.spec.hostNetwork is true: the pod's ports would be the node's, past every NetworkPolicy, and the node's processes would reach the app on its loopback.")
	}
	if s.HostPID || s.HostIPC {
		p.warn("spec.template.spec.hostPID/hostIPC must be false.")
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
		p.warn("securityContext.runAsNonRoot must be true.")
	}
	if uid := runAsUser(pod, c); uid == nil || *uid == 0 {
		p.warn("securityContext.runAsUser must be a numeric non-root user.")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		p.warn("securityContext.readOnlyRootFilesystem must be true.")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		p.warn("securityContext.allowPrivilegeEscalation must be false.")
	}
	if sc.Privileged != nil && *sc.Privileged {
		p.warn("securityContext.privileged must not be true.")
	}
	if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		p.warn("securityContext.capabilities.drop must contain ALL.")
	} else if len(sc.Capabilities.Add) > 0 {
		p.warn("securityContext.capabilities.add must be empty, not %v.", sc.Capabilities.Add)
	}
	seccomp := sc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	if seccomp == nil || (seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost) {
		p.warn("securityContext.seccompProfile.type must be RuntimeDefault (or Localhost).")
	}

	for _, kind := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := c.Resources.Requests[kind]
		lim, okLim := c.Resources.Limits[kind]
		switch {
		case !okReq || req.IsZero():
			p.warn("resources.requests.%s must be set.", kind)
		case !okLim || lim.IsZero():
			p.warn("resources.limits.%s must be set.", kind)
		case req.Cmp(lim) > 0:
			p.warn("resources.requests.%s %s exceeds the limit %s.", kind, req.String(), lim.String())
		}
	}

	for _, port := range c.Ports {
		if port.HostPort != 0 {
			p.add("port %d has hostPort %d: the node's port would skip every NetworkPolicy.", port.ContainerPort, port.HostPort)
		}
	}
	checkImage(p, c.Image)
}

// checkImage requires an explicit tag or digest other than latest.
func checkImage(p problems, image string) {
	if strings.Contains(image, "@sha256:") {
		return
	}
	if image == "" {
		p.warn("image is not set: name it with an explicit tag (not latest) or a digest.")
		return
	}
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	if !ok || tag == "" || tag == "latest" {
		p.warn("image %q needs an explicit tag (not latest) or a digest.", image)
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
				p.add("port %s must be TCP, not %s.", name, port.Protocol)
			}
			return port.ContainerPort
		}
	}
	p.add("no container port named %s.", name)
	return 0
}

// containerPortName names a container port by its name, or by its number
// when it has none.
func containerPortName(cp corev1.ContainerPort) string {
	if cp.Name != "" {
		return cp.Name
	}
	return strconv.Itoa(int(cp.ContainerPort))
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

// checkAdmin checks what is served on fenceproxy's admin port, in either
// mode: the probes (on the admin port, the paths fenceproxy serves, reported
// with p) and the Prometheus annotations of the pod template (reported with
// wp).
func checkAdmin(wp, p problems, w workload, c *corev1.Container, adminPort int32) {
	checkProbe(p, "livenessProbe", c, c.LivenessProbe, "/healthz", adminPort, true)
	checkProbe(p, "readinessProbe", c, c.ReadinessProbe, "/readyz", adminPort, true)
	checkProbe(p, "startupProbe", c, c.StartupProbe, "/healthz", adminPort, false)
	ann := w.meta.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != "/metrics" ||
		ann["prometheus.io/port"] != strconv.Itoa(int(adminPort)) {
		wp.warn("pod template annotations (spec.template.metadata.annotations) must be prometheus.io/scrape=true, prometheus.io/port=%d (%s), prometheus.io/path=/metrics; have %v.",
			adminPort, AdminPortName, promAnnotations(ann))
	}
}

func checkProbe(p problems, field string, c *corev1.Container, pr *corev1.Probe, path string, adminPort int32, required bool) {
	if pr == nil {
		if required {
			p.warn("%s is missing (httpGet %s on %s).", field, path, AdminPortName)
		}
		return
	}
	g := pr.HTTPGet
	if g == nil {
		p.warn("%s must be an httpGet (the image has no shell for exec).", field)
		return
	}
	if g.Path != path {
		p.warn("%s.httpGet.path is %q, want %q.", field, g.Path, path)
	}
	if got := resolvePort(c, g.Port); got == 0 || got != adminPort {
		p.warn("%s.httpGet.port %s is not the admin port %s (%d).", field, g.Port.String(), AdminPortName, adminPort)
	}
	if g.Host != "" {
		p.warn("%s.httpGet.host must be empty (the pod IP).", field)
	}
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
		p.warn("terminationGracePeriodSeconds %v is below the app's preStop sleeps (%v) + FENCE_SHUTDOWN_TIMEOUT (%v) + %v.",
			grace, sleeps, cfg.ShutdownTimeout, GraceMargin)
	}
}

package deploy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// Report is what Check found, by level, and facts about each fenced workload
// that a caller may require (a Service, a NetworkPolicy, Redis).
//
// Errors are what breaks fencing's safety or keeps fenceproxy from running
// as the manifests wire it: a path into the pod that skips the sidecar (a
// Service, NetworkPolicy, port or host network that reaches the app, the app
// off loopback), a store that can lose, evict or split the marks, a
// configuration that config.Load refuses, a keys file that is not mounted or
// leaks a private key, listeners that are not the ports the manifests
// publish, and a value the checks need but cannot see. Warnings are generic
// hardening and operations: security context, resources, image pinning,
// probes, the grace period, Prometheus annotations, who may reach the admin
// port. Err reports the errors only; a caller prints both.
type Report struct {
	Errors   []error
	Warnings []error
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

// Err joins the errors (nil when there are none); warnings do not fail it.
func (r Report) Err() error { return errors.Join(r.Errors...) }

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
	pdbs       []*policyv1.PodDisruptionBudget
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
		case *policyv1.PodDisruptionBudget:
			idx.pdbs = append(idx.pdbs, v)
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

// findings are the errors and the warnings of one run of the checks.
type findings struct {
	errors, warnings []error
}

// problems collects the findings of one object, each prefixed with its name
// (and, through sub, its container).
type problems struct {
	prefix string
	f      *findings
}

// add records an error: the manifests break fencing's safety or keep
// fenceproxy from running as they wire it.
func (p problems) add(format string, args ...any) {
	p.f.errors = append(p.f.errors, fmt.Errorf("%s: %s", p.prefix, fmt.Sprintf(format, args...)))
}

// warn records a warning: generic hardening or operations.
func (p problems) warn(format string, args ...any) {
	p.f.warnings = append(p.f.warnings, fmt.Errorf("%s: %s", p.prefix, fmt.Sprintf(format, args...)))
}

func (p problems) sub(prefix string) problems {
	return problems{prefix: p.prefix + ": " + prefix, f: p.f}
}

// Check asserts fenceproxy's requirements on rendered objects (see the
// package doc and Report for the two levels). Every workload's containers
// must be locked down; a workload with the fenceproxy sidecar must be wired
// so that nothing reaches its app but through the sidecar, with a
// configuration fenceproxy accepts; a Redis StatefulSet must keep what it is
// told.
//
// A container that runs `fenceproxy authz` (IsAuthzContainer) is never the
// sidecar, whatever its name: CheckAuthz checks it. Run both, as
// `cmd/render -check` does.
func Check(objs []Object) Report {
	var f findings
	var rep Report
	idx := newIndex(objs)
	for _, w := range idx.workloads {
		p := problems{prefix: w.obj.String(), f: &f}
		checkPod(p, w)
		if isRedis(w) {
			checkRedis(p, idx, w)
		}
		var sidecar *corev1.Container
		for i := range w.spec.Containers {
			if c := &w.spec.Containers[i]; c.Name == SidecarName && !IsAuthzContainer(c) {
				p.add("container %s is a regular container (spec.template.spec.containers): it must be an init container with restartPolicy Always (a native sidecar), so that it starts before the app and stops after it.", SidecarName)
			}
		}
		for i := range w.spec.InitContainers {
			if c := &w.spec.InitContainers[i]; c.Name == SidecarName && !IsAuthzContainer(c) {
				sidecar = c
			}
		}
		if sidecar == nil {
			continue
		}
		fenced := checkFenced(p, idx, w, sidecar)
		rep.Fenced = append(rep.Fenced, fenced)
	}
	rep.Errors, rep.Warnings = f.errors, f.warnings
	return rep
}

// checkFenced checks a workload with the fenceproxy sidecar c. Problems of
// the pod are reported with wp, those of the sidecar container with p.
func checkFenced(wp problems, idx *index, w workload, c *corev1.Container) Fenced {
	f := Fenced{Workload: w.obj.String()}
	p := wp.sub("container " + c.Name)
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		p.add("restartPolicy must be Always (a native sidecar); without it the pod waits for it to exit before starting the app.")
	}
	if uid := runAsUser(w.spec, c); uid == nil || *uid != SidecarUID {
		p.warn("securityContext.runAsUser must be %d, the image's USER.", SidecarUID)
	}

	dataPort, adminPort := namedPort(p, c, DataPortName), namedPort(p, c, AdminPortName)

	env := resolveEnv(p, idx, w, c)
	cfg, err := loadConfig(p, idx, w, c, env, config.Load)
	if err != nil {
		p.add("the environment (env, envFrom) and routes file fail fenceproxy's config.Load / route check: %s", oneLine(err))
	}
	f.Config = cfg
	checkTokenKeys(p, idx, w, c, env)

	checkAdmin(wp, p, w, c, adminPort)

	var upstreamPort int32
	if cfg != nil {
		checkListen(p, "FENCE_LISTEN_ADDR", cfg.ListenAddr, dataPort, DataPortName)
		checkListen(p, "FENCE_ADMIN_ADDR", cfg.AdminAddr, adminPort, AdminPortName)
		upstreamPort = checkUpstream(p, cfg, c)
		checkGrace(wp, w, cfg)
		f.Redis = checkStore(p, idx, w, c, cfg)
	}
	f.Services, f.NetworkPolicies = checkExposure(wp, idx, w, c, upstreamPort)
	checkAppProbes(wp, w, c)
	return f
}

// oneLine turns an error of fenceproxy's own checks (several joined by
// newlines) into the end of a finding: its lines trimmed and joined with
// "; ", ended by a period unless it already ends with a period, a question
// mark ("did you mean X?") or an exclamation mark. A finding that quotes an
// error ends with oneLine, without adding a period of its own.
func oneLine(err error) string {
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	s := strings.Join(lines, "; ")
	if !strings.HasSuffix(s, ".") && !strings.HasSuffix(s, "?") && !strings.HasSuffix(s, "!") {
		s += "."
	}
	return s
}

package deploy

import (
	"errors"
	"path"
	"slices"
	"strings"

	"github.com/fenceproxy/fenceproxy/config"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The names the authorization-mode manifests and these checks agree on.
const (
	// AuthzCommand is the subcommand of the authorization mode.
	AuthzCommand = "authz"
	// AuthzHTTPPortName is the container port of FENCE_LISTEN_ADDR in
	// authorization mode: the HTTP form (nginx auth_request, Traefik
	// ForwardAuth, ingress-nginx auth-url, Envoy's HTTP service).
	AuthzHTTPPortName = "authz-http"
	// AuthzGRPCPortName is the container port of FENCE_AUTHZ_GRPC_ADDR:
	// Envoy's gRPC Authorization/Check (Envoy, Istio).
	AuthzGRPCPortName = "authz-grpc"
)

// barrierVariables configure what only the proxy mode has: the drain
// barrier, the upstream deadline and the body read before admission. In
// authorization mode fenceproxy never sees the upstream exchange nor the
// body, and config.LoadAuthz accepts them without effect; setting them
// suggests an order at the upstream that this mode does not give.
var barrierVariables = []string{"FENCE_DRAIN", "FENCE_DRAIN_TIMEOUT", "FENCE_UPSTREAM_TIMEOUT", "FENCE_BODY_TIMEOUT"}

// Authz describes one workload running `fenceproxy authz`.
type Authz struct {
	Workload           string         // Kind/namespace/name
	Container          string         // the container running fenceproxy authz
	Config             *config.Config // as config.LoadAuthz read it; nil if it failed
	Services           []string       // Services selecting the pods
	NetworkPolicies    []string       // NetworkPolicies restricting ingress to the pods
	DisruptionBudgets  []string       // PodDisruptionBudgets selecting the pods
	Redis              string         // the StatefulSet FENCE_REDIS_URL reaches, "" if not among the objects
	HTTPPort, GRPCPort int32          // container ports of the HTTP and gRPC forms (0: none)
	ServiceGRPCPort    int32          // the Service port that reaches GRPCPort (0: none)
	ServiceHTTPPort    int32          // the Service port that reaches HTTPPort (0: none)
	ServiceName        string         // the first Service selecting the pods
	ServiceNamespace   string         // and its namespace
}

// AuthzReport is what CheckAuthz found, by level as in Report, and facts
// about each authz workload. Errors here are what lets a stale request
// through or keeps the front proxy from asking fenceproxy authz as the
// manifests wire it (the configuration, the keys file, the store, the
// listeners, the Service ports); warnings are hardening and availability
// (replicas, disruption budget, rollout strategy, probes, who may call it).
type AuthzReport struct {
	Errors   []error
	Warnings []error
	Authz    []Authz
}

// Err joins the errors (nil when there are none); warnings do not fail it.
func (r AuthzReport) Err() error { return errors.Join(r.Errors...) }

// IsAuthzContainer reports whether c runs `fenceproxy authz`: the fenceproxy
// image with the authz subcommand as its first argument (or last word of
// its command).
func IsAuthzContainer(c *corev1.Container) bool {
	if imageRepoBase(c.Image) != "fenceproxy" {
		return false
	}
	words := append(slices.Clone(c.Command), c.Args...)
	for _, w := range words {
		if w == AuthzCommand {
			return true
		}
		if !strings.HasPrefix(w, "/") && w != "fenceproxy" {
			return false // another subcommand
		}
	}
	return false
}

// imageRepoBase is the last path element of an image reference, without
// tag or digest: "fenceproxy" for registry.example.com/team/fenceproxy:v1.
func imageRepoBase(image string) string {
	image, _, _ = strings.Cut(image, "@")
	base := path.Base(image)
	base, _, _ = strings.Cut(base, ":")
	return base
}

// CheckAuthz checks the workloads that run `fenceproxy authz`, the
// authorization mode, in which a front proxy asks fenceproxy before each
// request and fenceproxy forwards nothing. A container is one of them when
// it runs the fenceproxy image with the authz subcommand
// (IsAuthzContainer), whatever its name: Check's sidecar rules never apply
// to it, even when it is named fenceproxy (there is no app in the pod and no
// upstream). Check (run it too) checks every pod's security context and
// resources and any Redis among the objects; CheckAuthz asserts what this
// mode needs:
//
//   - fenceproxy authz is a regular container (a service of its own, not a
//     sidecar), runs as the image's user, and its environment and routes
//     file pass fenceproxy's own config.LoadAuthz and route check (no
//     FENCE_UPSTREAM_URL needed), and its keys file, when
//     FENCE_TOKEN_KEYS_FILE is set, passes the sidecar's keys file checks
//     (checkTokenKeys); the proxy-only settings (drain barrier,
//     upstream and body timeouts) are not set, since they do nothing here;
//   - its listeners are published as the container ports authz-http,
//     authz-grpc (when FENCE_AUTHZ_GRPC_ADDR is set, and only then) and
//     fence-admin, on every interface (the front proxy is another pod);
//     liveness (/healthz) and readiness (/readyz) probe the admin port, and
//     Prometheus scrapes it;
//   - availability: every request through the front proxy waits for it and
//     is refused while it cannot be asked, so at least two replicas sharing
//     one store (no bolt, no memory), a PodDisruptionBudget that keeps one,
//     and a rolling update that never has fewer ready pods than replicas;
//   - a Service reaches the HTTP or gRPC port (never the admin port), and
//     names a gRPC port as such (appProtocol grpc or a grpc name) so that
//     Istio and Envoy speak HTTP/2 to it;
//   - a NetworkPolicy admits only named callers: whoever reaches it has its
//     decisions made (moves marks with any token it holds, reads marks from
//     refusals), so every rule names its ports and its sources.
func CheckAuthz(objs []Object) AuthzReport {
	var f findings
	var rep AuthzReport
	idx := newIndex(objs)
	for _, w := range idx.workloads {
		p := problems{prefix: w.obj.String(), f: &f}
		for i := range w.spec.InitContainers {
			if IsAuthzContainer(&w.spec.InitContainers[i]) {
				p.add("init container %s runs fenceproxy authz: the authorization mode is a service of its own (a regular container of its own Deployment), not a sidecar.", w.spec.InitContainers[i].Name)
			}
		}
		for i := range w.spec.Containers {
			c := &w.spec.Containers[i]
			if IsAuthzContainer(c) {
				rep.Authz = append(rep.Authz, checkAuthzWorkload(p, idx, w, c))
			}
		}
	}
	rep.Errors, rep.Warnings = f.errors, f.warnings
	return rep
}

func checkAuthzWorkload(wp problems, idx *index, w workload, c *corev1.Container) Authz {
	a := Authz{Workload: w.obj.String(), Container: c.Name}
	p := wp.sub("container " + c.Name)
	if uid := runAsUser(w.spec, c); uid == nil || *uid != SidecarUID {
		p.warn("securityContext.runAsUser must be %d, the image's USER.", SidecarUID)
	}
	httpPort, adminPort := namedPort(p, c, AuthzHTTPPortName), namedPort(p, c, AdminPortName)
	a.HTTPPort = httpPort
	var grpcPort int32
	for _, cp := range c.Ports {
		if cp.Name == AuthzGRPCPortName {
			grpcPort = cp.ContainerPort
		}
	}
	a.GRPCPort = grpcPort

	env := resolveEnv(p, idx, w, c)
	cfg, err := loadConfig(p, idx, w, c, env, config.LoadAuthz)
	if err != nil {
		p.add("the environment (env, envFrom) and routes file fail fenceproxy's config.LoadAuthz / route check: %s", oneLine(err))
	}
	a.Config = cfg
	checkTokenKeys(p, idx, w, c, env)
	for _, v := range barrierVariables {
		if _, set := env[v]; set {
			p.warn("%s is set: it has no effect in authorization mode, where fenceproxy never sees the upstream exchange nor the body (there is no drain barrier); remove it.", v)
		}
	}

	checkAdmin(wp, p, w, c, adminPort)

	if cfg != nil {
		checkListen(p, "FENCE_LISTEN_ADDR", cfg.ListenAddr, httpPort, AuthzHTTPPortName)
		checkListen(p, "FENCE_ADMIN_ADDR", cfg.AdminAddr, adminPort, AdminPortName)
		switch {
		case cfg.Authz.GRPCAddr != "" && grpcPort == 0:
			p.add("FENCE_AUTHZ_GRPC_ADDR %q is set but no container port is named %s.", cfg.Authz.GRPCAddr, AuthzGRPCPortName)
		case cfg.Authz.GRPCAddr != "":
			checkListen(p, "FENCE_AUTHZ_GRPC_ADDR", cfg.Authz.GRPCAddr, grpcPort, AuthzGRPCPortName)
		case grpcPort != 0:
			p.add("container port %s is declared but FENCE_AUTHZ_GRPC_ADDR is unset: nothing listens there.", AuthzGRPCPortName)
		}
		checkGrace(wp, w, cfg)
		a.Redis = checkStore(p, idx, w, c, cfg)
		if cfg.Store == config.StoreBolt {
			p.add("the bolt store is one file in one pod: fenceproxy authz needs replicas sharing one store (Redis or etcd).")
		}
	}

	checkAuthzAvailability(wp, idx, w, &a)
	checkAuthzExposure(wp, idx, w, c, httpPort, grpcPort, adminPort, &a)
	return a
}

// checkAuthzAvailability: fail closed means a missing fenceproxy refuses
// every fenced request through the front proxy.
func checkAuthzAvailability(p problems, idx *index, w workload, a *Authz) {
	if w.replicas < 2 {
		p.warn("spec.replicas %d: every fenced request through the front proxy is refused while fenceproxy authz cannot be asked; run at least 2.", w.replicas)
	}
	podLabels := labels.Set(w.meta.Labels)
	for _, pdb := range idx.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if pdb.Namespace != w.ns || err != nil || sel.Empty() || !sel.Matches(podLabels) {
			continue
		}
		a.DisruptionBudgets = append(a.DisruptionBudgets, pdb.Name)
		switch {
		case pdb.Spec.MinAvailable != nil:
			if v := pdb.Spec.MinAvailable; v.Type == intstr.Int && v.IntVal < 1 {
				p.warn("PodDisruptionBudget %s minAvailable %d keeps no pod.", pdb.Name, v.IntVal)
			}
		case pdb.Spec.MaxUnavailable != nil:
			if v := pdb.Spec.MaxUnavailable; v.Type == intstr.Int && v.IntVal >= w.replicas {
				p.warn("PodDisruptionBudget %s maxUnavailable %d lets every pod go.", pdb.Name, v.IntVal)
			}
		}
	}
	if len(a.DisruptionBudgets) == 0 {
		p.warn("no PodDisruptionBudget selects the pods: a node drain may evict every replica at once.")
	}
	if dep, ok := w.obj.Obj.(*appsv1.Deployment); ok {
		if ru := dep.Spec.Strategy.RollingUpdate; dep.Spec.Strategy.Type == "Recreate" {
			p.warn("spec.strategy Recreate stops every replica before starting new ones.")
		} else if ru == nil || ru.MaxUnavailable == nil || !(ru.MaxUnavailable.Type == intstr.Int && ru.MaxUnavailable.IntVal == 0) {
			p.warn("spec.strategy.rollingUpdate.maxUnavailable must be 0: a rollout must not take a replica away before its replacement is ready (the default, 25%%, does).")
		}
	}
}

// checkAuthzExposure: a Service reaches the data ports only; NetworkPolicies
// name the callers of every port.
func checkAuthzExposure(p problems, idx *index, w workload, c *corev1.Container, httpPort, grpcPort, adminPort int32, a *Authz) {
	podLabels := labels.Set(w.meta.Labels)
	for _, svc := range selectingServices(idx, w.ns, podLabels) {
		a.Services = append(a.Services, svc.Name)
		if a.ServiceName == "" {
			a.ServiceName, a.ServiceNamespace = svc.Name, svc.Namespace
		}
		for _, sp := range svc.Spec.Ports {
			tp := targetPort(sp)
			switch target := declaredPort(c, tp); {
			case target == 0:
				p.add("Service %s port %s has targetPort %s, not a port of container %s.", svc.Name, servicePortName(sp), tp.String(), c.Name)
			case target == adminPort:
				p.warn("Service %s port %s targets the admin port %s (targetPort %s): /metrics (and pprof, when on) is not for callers; Prometheus scrapes the pods.", svc.Name, servicePortName(sp), AdminPortName, tp.String())
			case target == grpcPort:
				if a.ServiceGRPCPort == 0 {
					a.ServiceGRPCPort = sp.Port
				}
				if (sp.AppProtocol == nil || *sp.AppProtocol != "grpc") && sp.Name != "grpc" && !strings.HasPrefix(sp.Name, "grpc-") {
					p.add("Service %s port %s reaches the gRPC port but says so neither by appProtocol: grpc nor by a name grpc or grpc-*: Istio would treat it as HTTP/1 or TCP.", svc.Name, servicePortName(sp))
				}
			case target == httpPort:
				if a.ServiceHTTPPort == 0 {
					a.ServiceHTTPPort = sp.Port
				}
			}
		}
	}
	if len(a.Services) == 0 {
		p.add("no Service selects the pods: the front proxy has nothing stable to call.")
	}

	for _, np := range ingressPolicies(idx, w.ns, podLabels) {
		a.NetworkPolicies = append(a.NetworkPolicies, np.Name)
		for i, rule := range np.Spec.Ingress {
			if len(rule.Ports) == 0 {
				p.warn("NetworkPolicy %s ingress[%d] admits every port (it lists no ports).", np.Name, i)
			}
			if len(rule.From) == 0 {
				p.warn("NetworkPolicy %s ingress[%d] admits every source (it lists no from): name the front proxy's pods (whoever reaches fenceproxy authz has its decisions made, and reads marks in its refusals).", np.Name, i)
			}
			for _, port := range rule.Ports {
				switch wide := widePort(port); {
				case wide != "":
					p.warn("NetworkPolicy %s ingress[%d] admits %s.", np.Name, i, wide)
				case declaredPort(c, *port.Port) == 0:
					p.warn("NetworkPolicy %s ingress[%d] admits port %s, not a port of container %s.", np.Name, i, port.Port.String(), c.Name)
				}
			}
		}
	}
	if len(a.NetworkPolicies) == 0 {
		p.warn("no NetworkPolicy restricts ingress to the pods: anyone in the cluster can have decisions made.")
	}
}

// declaredPort is resolvePort, but 0 also for a number c does not declare.
func declaredPort(c *corev1.Container, port intstr.IntOrString) int32 {
	n := resolvePort(c, port)
	if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == n }) {
		return 0
	}
	return n
}

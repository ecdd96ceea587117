package deploy

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// checkExposure checks every way into the pod: Services and NetworkPolicies
// admit only the sidecar's ports, and the app cannot be reached but through
// the sidecar, either because it listens on loopback only and declares no
// port, or because NetworkPolicies admit ingress to the sidecar's ports
// alone (what `fenceproxy inject` writes). It returns the Services and
// NetworkPolicies that select the pod.
func checkExposure(p problems, idx *index, w workload, sidecar *corev1.Container, upstreamPort int32) (services, policies []string) {
	podLabels := labels.Set(w.meta.Labels)
	sidecarPort := func(port intstr.IntOrString) bool {
		if port.Type == intstr.String {
			return slices.ContainsFunc(sidecar.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == port.StrVal })
		}
		return slices.ContainsFunc(sidecar.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == port.IntVal })
	}

	// NetworkPolicies are additive: the pod is guarded only if every one
	// that selects it admits the sidecar's ports alone.
	guarded := true
	for _, np := range ingressPolicies(idx, w.ns, podLabels) {
		policies = append(policies, np.Name)
		for i, rule := range np.Spec.Ingress {
			if len(rule.Ports) == 0 {
				p.add("NetworkPolicy %s ingress[%d] admits every port (it lists no ports), the app's too: list the sidecar's ports.", np.Name, i)
				guarded = false
			}
			for _, port := range rule.Ports {
				switch wide := widePort(port); {
				case wide != "":
					p.add("NetworkPolicy %s ingress[%d] admits %s.", np.Name, i, wide)
					guarded = false
				case !sidecarPort(*port.Port):
					p.add("NetworkPolicy %s ingress[%d] admits port %s, not a port of the sidecar.", np.Name, i, port.Port.String())
					guarded = false
				case resolvePort(sidecar, *port.Port) != resolvePort(sidecar, intstr.FromString(DataPortName)) && len(rule.From) == 0:
					p.warn("NetworkPolicy %s ingress[%d] admits the admin port %s from everyone (it lists no from): restrict it to Prometheus.", np.Name, i, port.Port.String())
				}
			}
		}
	}
	guarded = guarded && len(policies) > 0

	// Without that guard, only loopback keeps the app's port in the pod:
	// the app declares no port and listens on loopback, explicitly.
	const either = "either the app listens on loopback only and declares no port, or a NetworkPolicy admits ingress to the sidecar's ports alone (fenceproxy inject writes one)"
	exposed := 0
	listens := 0
	for _, c := range allContainers(w.spec) {
		if c == sidecar {
			continue
		}
		for _, cp := range c.Ports {
			exposed++
			if !guarded {
				p.add("container %s declares port %d and no NetworkPolicy keeps it from outside the pod (a Service or client could reach the app past the sidecar): %s.", c.Name, cp.ContainerPort, either)
			}
		}
		for _, a := range listenAddrs(c, upstreamPort) {
			host, _, _ := net.SplitHostPort(a)
			if !isLoopback(host) {
				exposed++
				if !guarded {
					p.add("container %s listens on %q (its command, args or env) and no NetworkPolicy keeps that port from outside the pod: %s (127.0.0.1:%d).", c.Name, a, either, upstreamPort)
				}
			}
			listens++
		}
	}
	if upstreamPort != 0 && listens == 0 && !guarded {
		exposed++
		p.add("no app container's command, args or env name its listen address 127.0.0.1:%d, and no NetworkPolicy guards the pod: the app's default may be every interface; make the loopback address explicit, or add a NetworkPolicy admitting the sidecar's ports alone.", upstreamPort)
	}
	if len(policies) == 0 {
		if exposed > 0 {
			p.add("no NetworkPolicy restricts ingress to the pods: any other port (the app's, should it listen beyond loopback) is open.")
		} else {
			p.warn("no NetworkPolicy restricts ingress to the pods: the app is on loopback, but a NetworkPolicy admitting the sidecar's ports alone would keep it so should that change.")
		}
	}

	for _, svc := range selectingServices(idx, w.ns, podLabels) {
		services = append(services, svc.Name)
		for _, sp := range svc.Spec.Ports {
			tp := targetPort(sp)
			if !sidecarPort(tp) || (tp.Type == intstr.Int && tp.IntVal == upstreamPort) {
				p.add("Service %s port %s has targetPort %s, not a port of the sidecar: requests would skip the fence.", svc.Name, servicePortName(sp), tp.String())
			}
		}
	}
	return services, policies
}

// selectingServices are the Services of namespace ns whose selector selects
// pods labelled podLabels (a Service without a selector selects none).
func selectingServices(idx *index, ns string, podLabels labels.Set) []*corev1.Service {
	var out []*corev1.Service
	for _, svc := range idx.services {
		if svc.Namespace == ns && len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			out = append(out, svc)
		}
	}
	return out
}

// targetPort is the container port a Service port sends to: its targetPort,
// which defaults to its port.
func targetPort(sp corev1.ServicePort) intstr.IntOrString {
	if tp := sp.TargetPort; tp.Type != intstr.Int || tp.IntVal != 0 {
		return tp
	}
	return intstr.FromInt32(sp.Port)
}

// servicePortName names a Service port by its name, or by its number when it
// has none (a Service with a single port may leave it unnamed).
func servicePortName(sp corev1.ServicePort) string {
	if sp.Name != "" {
		return sp.Name
	}
	return strconv.Itoa(int(sp.Port))
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

// ingressPolicies are the NetworkPolicies of namespace ns that select pods
// labelled podLabels and restrict their ingress.
func ingressPolicies(idx *index, ns string, podLabels labels.Set) []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	for _, np := range idx.policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if np.Namespace != ns || err != nil || !sel.Matches(podLabels) {
			continue
		}
		if len(np.Spec.PolicyTypes) > 0 && !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			continue
		}
		out = append(out, np)
	}
	return out
}

// widePort says what a NetworkPolicy ports entry admits beyond one port
// ("every port of its protocol", "a port range"), or "" when it names one.
func widePort(port networkingv1.NetworkPolicyPort) string {
	switch {
	case port.Port == nil:
		return "every port of its protocol (a ports entry without port)"
	case port.EndPort != nil:
		return fmt.Sprintf("a port range (%s to endPort %d)", port.Port.String(), *port.EndPort)
	}
	return ""
}

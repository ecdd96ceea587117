package deploy

import (
	"fmt"
	"net"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// checkAppProbes checks that every probe of the app's containers can still
// reach the app once the sidecar is in front of it. The kubelet resolves a
// probe's named port among the container's own declared ports, and dials
// the pod's IP from the node: a probe naming a port the container no
// longer declares, or a port the app serves on loopback only, fails
// forever, and the pod never becomes Ready (or is restarted in a loop).
func checkAppProbes(p problems, w workload, sidecar *corev1.Container) {
	for _, c := range allContainers(w.spec) {
		if c == sidecar || c.Name == SidecarName {
			continue
		}
		for _, pr := range []struct {
			field string
			probe *corev1.Probe
		}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
			if pr.probe == nil {
				continue
			}
			checkAppProbe(p.sub("container "+c.Name), pr.field, c, pr.probe.ProbeHandler)
		}
	}
}

func checkAppProbe(p problems, field string, c *corev1.Container, h corev1.ProbeHandler) {
	var port intstr.IntOrString
	switch {
	case h.HTTPGet != nil:
		field += ".httpGet"
		port = h.HTTPGet.Port
		if host := h.HTTPGet.Host; host != "" && isLoopback(host) {
			p.add("%s.host %q is the node's loopback, not the pod's: the kubelet probes from the node; leave host empty (the pod IP).", field, host)
		}
	case h.TCPSocket != nil:
		field += ".tcpSocket"
		port = h.TCPSocket.Port
		if host := h.TCPSocket.Host; host != "" && isLoopback(host) {
			p.add("%s.host %q is the node's loopback, not the pod's: the kubelet probes from the node; leave host empty (the pod IP).", field, host)
		}
	case h.GRPC != nil:
		field += ".grpc"
		port = intstr.FromInt32(h.GRPC.Port)
	default:
		return // exec runs inside the container, where loopback is the app's
	}
	number := port.IntVal
	if port.Type == intstr.String {
		i := slices.IndexFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == port.StrVal })
		if i < 0 {
			p.add("%s.port %q names no port of the container (it declares %s): the kubelet cannot resolve it and the probe always fails; declare the port (and guard the pod with a NetworkPolicy admitting the sidecar's ports alone) or probe a number.", field, port.StrVal, declared(c))
			return
		}
		number = c.Ports[i].ContainerPort
	}
	addrs := listenAddrs(c, number)
	if len(addrs) > 0 && !slices.ContainsFunc(addrs, func(a string) bool {
		host, _, _ := net.SplitHostPort(a)
		return !isLoopback(host)
	}) {
		p.add("%s.port %d: the app listens on %s, loopback only, and the kubelet probes the pod's IP from the node: the probe always fails; probe through fenceproxy's readiness, or let the app listen on every interface behind a NetworkPolicy admitting the sidecar's ports alone.", field, number, addrs[0])
	}
}

func declared(c *corev1.Container) string {
	if len(c.Ports) == 0 {
		return "none"
	}
	var s []string
	for _, cp := range c.Ports {
		s = append(s, containerPortName(cp))
	}
	return fmt.Sprint(s)
}

package inject

import (
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// service is a Service with a selector and the workloads it selects.
type service struct {
	obj       *object
	workloads []*workload
}

func (p *plan) readService(o *object) {
	var sel map[string]string
	if n := path(o.node, "spec", "selector"); n != nil {
		if err := n.Decode(&sel); err != nil {
			p.fail(o, "spec.selector: %v", err)
			return
		}
	}
	if len(sel) == 0 {
		return // selects no pods (its endpoints are managed by hand)
	}
	s := &service{obj: o}
	for _, w := range p.workloads {
		if w.obj.ns == o.ns && matches(sel, w.podLabels) {
			s.workloads = append(s.workloads, w)
			w.services = append(w.services, s)
		}
	}
	if len(s.workloads) > 0 {
		p.services = append(p.services, s)
	}
}

func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// servicePort is one entry of a Service's spec.ports.
type servicePort struct {
	node     *yaml.Node
	label    string // its name, or its number when it has none
	protocol string
	// target is its targetPort (its port when unset): a name or a number.
	target    string
	targetNum int32
}

func (s *service) ports() []servicePort {
	n := path(s.obj.node, "spec", "ports")
	if n == nil {
		return nil
	}
	var out []servicePort
	for _, pn := range n.Content {
		sp := servicePort{node: pn, label: scalar(pn, "name"), protocol: scalar(pn, "protocol")}
		num := scalar(pn, "port")
		if sp.label == "" {
			sp.label = num
		}
		sp.target = scalar(pn, "targetPort")
		if sp.target == "" {
			sp.target = num
		}
		if n, err := strconv.Atoi(sp.target); err == nil {
			sp.targetNum = int32(n)
		}
		out = append(out, sp)
	}
	return out
}

// resolve finds the app port a Service port sends to, among w's ports.
func (sp servicePort) resolve(w *workload) (port, bool) {
	for _, ap := range w.ports {
		if (sp.targetNum != 0 && ap.number == sp.targetNum) || (sp.targetNum == 0 && ap.name == sp.target) {
			return ap, true
		}
	}
	return port{}, false
}

// move is a Service port whose targetPort becomes fenceproxy's data port.
type move struct {
	svc  *service
	port *yaml.Node
	to   int32
}

// planServices decides, for each Service selecting a fenced workload, which
// ports move to fenceproxy; a port that would reach the app any other way
// is a problem.
func (p *plan) planServices() []move {
	var moves []move
	for _, s := range p.services {
		var fenced, plain []string
		for _, w := range s.workloads {
			if w.fenced() {
				fenced = append(fenced, w.obj.String())
			} else {
				plain = append(plain, w.obj.String())
			}
		}
		if len(fenced) == 0 {
			continue
		}
		if len(plain) > 0 {
			p.fail(s.obj, "selects %s, which get fenceproxy, and %s, which do not: half its traffic would skip the fence; inject them all (drop --workload) or split the Service", strings.Join(fenced, ", "), strings.Join(plain, ", "))
			continue
		}
		for _, sp := range s.ports() {
			var to int32
			ok := true
			for _, w := range s.workloads {
				if w.data == 0 {
					// Injected before without the usual port (the checks
					// judge it), or its ports were refused above.
					continue
				}
				switch ap, found := sp.resolve(w); {
				case sp.target == DataPortName || (sp.targetNum != 0 && sp.targetNum == w.data):
					continue // already fenceproxy's
				case sp.protocol != "" && sp.protocol != "TCP":
					p.fail(s.obj, "port %s is %s: fenceproxy serves TCP only, and its NetworkPolicy admits nothing else; remove the port", sp.label, sp.protocol)
				case found && ap == w.app, !found && sp.targetNum != 0 && sp.targetNum == w.app.number:
					if to != 0 && to != w.data {
						p.fail(s.obj, "port %s selects workloads whose fenceproxy ports differ (%d, %d): give --port so they share one", sp.label, to, w.data)
					}
					to = w.data
					continue
				case found:
					p.fail(s.obj, "port %s targets %s of %s, which fenceproxy does not front: the NetworkPolicy would block it. Remove the port from the Service, or give --app-port if it is the app's", sp.label, ap, w.obj)
				default:
					p.fail(s.obj, "port %s targets %s, which is no port of %s's app (%s): nothing would answer through the sidecar", sp.label, sp.target, w.obj, w.app)
				}
				ok = false
			}
			if ok && to != 0 {
				moves = append(moves, move{svc: s, port: sp.node, to: to})
			}
		}
	}
	return moves
}

// checkPolicies refuses a NetworkPolicy of the input that admits the app's
// port of a workload about to be injected: policies add up, so it would
// keep that port open past the sidecar whatever inject adds.
func (p *plan) checkPolicies() {
	for _, o := range p.objs {
		if o.kind != "NetworkPolicy" || strings.HasSuffix(o.name, PolicySuffix) {
			continue
		}
		var np struct {
			Spec struct {
				PodSelector struct {
					MatchLabels      map[string]string `yaml:"matchLabels"`
					MatchExpressions []any             `yaml:"matchExpressions"`
				} `yaml:"podSelector"`
				PolicyTypes []string `yaml:"policyTypes"`
				Ingress     []struct {
					Ports []struct {
						Port    any   `yaml:"port"` // a number, a name, or absent (every port)
						EndPort int32 `yaml:"endPort"`
					} `yaml:"ports"`
				} `yaml:"ingress"`
			} `yaml:"spec"`
		}
		if err := o.node.Decode(&np); err != nil {
			p.fail(o, "%v", err)
			continue
		}
		if len(np.Spec.PolicyTypes) > 0 && !slices.Contains(np.Spec.PolicyTypes, "Ingress") {
			continue
		}
		for _, w := range p.workloads {
			// A selector with expressions is judged by the deploy checks.
			if !w.selected || w.app.number == 0 || w.obj.ns != o.ns || len(np.Spec.PodSelector.MatchExpressions) > 0 ||
				!matches(np.Spec.PodSelector.MatchLabels, w.podLabels) {
				continue
			}
			for i, rule := range np.Spec.Ingress {
				if len(rule.Ports) == 0 {
					p.fail(o, "ingress[%d] admits every port of the pods of %s, the app's %s too: policies add up, so the app would stay reachable past fenceproxy; list ports there (not the app's)", i, w.obj, w.app)
				}
				for _, pt := range rule.Ports {
					n, _ := pt.Port.(int)
					name, _ := pt.Port.(string)
					hit := pt.Port == nil || (n != 0 && (n == int(w.app.number) || (pt.EndPort != 0 && n <= int(w.app.number) && int(w.app.number) <= int(pt.EndPort)))) ||
						(name != "" && name == w.app.name) || (name != "" && name == strconv.Itoa(int(w.app.number)))
					if hit {
						p.fail(o, "ingress[%d] admits the app's port %s of %s: policies add up, so the app would stay reachable past fenceproxy; remove that port from the policy", i, w.app, w.obj)
					}
				}
			}
		}
	}
}

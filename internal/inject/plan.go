package inject

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// containerSpec is what inject reads of a container.
type containerSpec struct {
	Name  string `yaml:"name"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int32  `yaml:"containerPort"`
		Protocol      string `yaml:"protocol"`
		HostPort      int32  `yaml:"hostPort"`
	} `yaml:"ports"`
	Env []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
}

// port is a container port of the app (name may be empty).
type port struct {
	container, name string
	number          int32
}

func (p port) String() string {
	if p.name == "" {
		return fmt.Sprintf("%s/%d", p.container, p.number)
	}
	return fmt.Sprintf("%s/%s (%d)", p.container, p.name, p.number)
}

// workload is a Deployment or StatefulSet and what inject decided for it.
type workload struct {
	obj       *object
	podLabels map[string]string
	tmeta     *yaml.Node // spec.template.metadata
	podSpec   *yaml.Node // spec.template.spec
	selector  *yaml.Node // spec.selector
	ports     []port     // TCP ports of the regular containers
	used      map[int32]bool
	injected  bool // it already has the sidecar
	selected  bool // it is to be injected now
	services  []*service

	app         port // the port fenceproxy fronts; number 0 when unknown
	data, admin int32
}

// fenced reports whether the workload has the sidecar once inject is done.
func (w *workload) fenced() bool { return w.injected || w.selected }

// plan decides everything before changing anything, so that an error
// leaves no half-injected stream.
type plan struct {
	opts      Options
	objs      []*object
	workloads []*workload
	services  []*service
	problems  []error
}

func (p *plan) fail(o fmt.Stringer, format string, args ...any) {
	p.problems = append(p.problems, fmt.Errorf("%s: %s", o, fmt.Sprintf(format, args...)))
}

func (p *plan) run() error {
	for _, o := range p.objs {
		if o.apiVersion == "apps/v1" && (o.kind == "Deployment" || o.kind == "StatefulSet") {
			if w := p.readWorkload(o); w != nil {
				p.workloads = append(p.workloads, w)
			}
		}
	}
	for _, name := range p.opts.Workloads {
		if !slices.ContainsFunc(p.workloads, func(w *workload) bool { return w.obj.name == name }) {
			p.problems = append(p.problems, fmt.Errorf("--workload %s: no Deployment or StatefulSet of that name in the input", name))
		}
	}
	for k := range p.opts.AppPorts {
		if k != "" && !slices.ContainsFunc(p.workloads, func(w *workload) bool { return w.obj.name == k }) {
			p.problems = append(p.problems, fmt.Errorf("--app-port %s=...: no Deployment or StatefulSet of that name in the input", k))
		}
	}
	for _, o := range p.objs {
		if o.apiVersion == "v1" && o.kind == "Service" {
			p.readService(o)
		}
	}
	for _, w := range p.workloads {
		if w.selected {
			p.choosePorts(w)
		}
	}
	moves := p.planServices()
	p.checkPolicies()
	if len(p.problems) > 0 {
		return errors.Join(p.problems...)
	}

	for _, w := range p.workloads {
		// A workload that has the sidecar already (injected before, or by
		// Helm or Kustomize) keeps its own arrangements: no second policy.
		if w.selected {
			p.inject(w)
			if !p.hasPolicy(w) {
				w.obj.addAfter(policy(w, p.opts.MetricsNamespace))
			}
		}
	}
	for _, mv := range moves {
		set(mv.port, "targetPort", intNode(mv.to), "port")
		mv.svc.obj.doc.changed = true
	}
	return nil
}

// addAfter writes n right after o: the next item of o's List, or the next
// document.
func (o *object) addAfter(n *yaml.Node) {
	if o.list == nil {
		o.doc.after = append(o.doc.after, &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{n}})
		return
	}
	i := slices.Index(o.list.Content, o.node)
	o.list.Content = slices.Insert(o.list.Content, i+1, n)
	o.doc.changed = true
}

func (p *plan) readWorkload(o *object) *workload {
	spec := get(o.node, "spec")
	w := &workload{obj: o, selector: get(spec, "selector"), tmeta: path(spec, "template", "metadata"),
		podSpec: path(spec, "template", "spec"), used: map[int32]bool{}}
	if w.podSpec == nil || w.podSpec.Kind != yaml.MappingNode {
		p.fail(o, "no spec.template.spec")
		return nil
	}
	if w.selector == nil || w.selector.Kind != yaml.MappingNode {
		p.fail(o, "no spec.selector (apps/v1 requires one; the NetworkPolicy selects the pods with it)")
		return nil
	}
	if n := get(w.tmeta, "labels"); n != nil {
		if err := n.Decode(&w.podLabels); err != nil {
			p.fail(o, "spec.template.metadata.labels: %v", err)
		}
	}
	w.selected = len(p.opts.Workloads) == 0 || slices.Contains(p.opts.Workloads, o.name)

	var containers, inits []containerSpec
	if n := get(w.podSpec, "containers"); n != nil {
		if err := n.Decode(&containers); err != nil {
			p.fail(o, "spec.template.spec.containers: %v", err)
			return nil
		}
	}
	if n := get(w.podSpec, "initContainers"); n != nil {
		if err := n.Decode(&inits); err != nil {
			p.fail(o, "spec.template.spec.initContainers: %v", err)
			return nil
		}
	}
	for _, c := range containers {
		if c.Name == SidecarName {
			p.fail(o, "container %s is a regular container: remove it (inject adds fenceproxy as a native sidecar) or rename it", c.Name)
			w.selected = false
		}
		for _, cp := range c.Ports {
			w.used[cp.ContainerPort] = true
			if cp.Protocol == "" || cp.Protocol == "TCP" {
				w.ports = append(w.ports, port{container: c.Name, name: cp.Name, number: cp.ContainerPort})
			}
			if cp.HostPort != 0 && w.selected {
				p.fail(o, "container %s port %d has hostPort %d: the node's port reaches the app past the sidecar and any NetworkPolicy; remove hostPort", c.Name, cp.ContainerPort, cp.HostPort)
			}
		}
	}
	for _, c := range inits {
		for _, cp := range c.Ports {
			w.used[cp.ContainerPort] = true
		}
		if c.Name != SidecarName {
			continue
		}
		// Injected before (by inject, Helm or the Kustomize component):
		// left as it is, its ports read back for the Service and policy.
		w.injected, w.selected = true, false
		for _, cp := range c.Ports {
			switch cp.Name {
			case DataPortName:
				w.data = cp.ContainerPort
			case AdminPortName:
				w.admin = cp.ContainerPort
			}
		}
		for _, e := range c.Env {
			if e.Name == "FENCE_UPSTREAM_URL" {
				if u, err := url.Parse(e.Value); err == nil {
					n, _ := strconv.Atoi(u.Port())
					w.app = port{number: int32(n)}
					for _, ap := range w.ports {
						if ap.number == int32(n) {
							w.app = ap
						}
					}
				}
			}
		}
	}
	if w.selected && scalar(w.podSpec, "hostNetwork") == "true" {
		p.fail(o, "spec.template.spec.hostNetwork is true: the pod's ports are the node's, which no NetworkPolicy restricts, so the app's port would stay open past the sidecar")
	}
	return w
}

// choosePorts decides the app's port and fenceproxy's two ports for w.
func (p *plan) choosePorts(w *workload) {
	want, told := p.opts.AppPorts[w.obj.name]
	if !told {
		want, told = p.opts.AppPorts[""]
	}
	flag := "--app-port " + w.obj.name + "=PORT"
	switch {
	case told:
		n, err := strconv.Atoi(want)
		found := false
		for _, ap := range w.ports {
			if (err == nil && ap.number == int32(n)) || (err != nil && ap.name == want) {
				w.app, found = ap, true
			}
		}
		switch {
		case found:
		case err == nil && n > 0 && n < 65536:
			w.app = port{number: int32(n)} // a port the app listens on without declaring it
		default:
			p.fail(w.obj, "--app-port %s is no container port of the pod (have %s)", want, portList(w.ports))
			return
		}
	case len(w.ports) == 1:
		w.app = w.ports[0]
	case len(w.ports) == 0:
		p.fail(w.obj, "no container declares a TCP port, so which one the app listens on is unknown: give %s (a number)", flag)
		return
	default:
		// Several ports: the one the Services send to, if they agree.
		var targeted []port
		for _, s := range w.services {
			for _, sp := range s.ports() {
				if ap, ok := sp.resolve(w); ok && !slices.Contains(targeted, ap) {
					targeted = append(targeted, ap)
				}
			}
		}
		if len(targeted) != 1 {
			p.fail(w.obj, "several ports could be the app's: %s; name the one fenceproxy fronts with %s (its name or number)", portList(w.ports), flag)
			return
		}
		w.app = targeted[0]
	}
	w.used[w.app.number] = true

	pick := func(flagName string, given, from int32) int32 {
		if given != 0 {
			if w.used[given] {
				p.fail(w.obj, "%s %d is already a port of the pod (%s)", flagName, given, portList(w.ports))
			}
			return given
		}
		for n := from; ; n++ {
			if !w.used[n] {
				return n
			}
		}
	}
	w.data = pick("--port", p.opts.DataPort, DefaultDataPort)
	w.used[w.data] = true
	w.admin = pick("--admin-port", p.opts.AdminPort, DefaultAdminPort)
	if w.admin == w.data {
		p.fail(w.obj, "--port and --admin-port are both %d", w.data)
	}
}

func portList(ps []port) string {
	if len(ps) == 0 {
		return "none declared"
	}
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, ", ")
}

// inject adds the sidecar, its volume, label and annotations to w's pods.
func (p *plan) inject(w *workload) {
	w.obj.doc.changed = true
	tmpl := get(get(w.obj.node, "spec"), "template")
	meta := child(tmpl, "metadata", yaml.MappingNode)
	set(child(meta, "labels", yaml.MappingNode), PodLabel, quoted("true"), "")
	ann := child(meta, "annotations", yaml.MappingNode)
	hasProm := false
	for i := 0; i < len(ann.Content); i += 2 {
		hasProm = hasProm || strings.HasPrefix(ann.Content[i].Value, "prometheus.io/")
	}
	if !hasProm { // the app's own scrape settings win; the checks say so
		set(ann, "prometheus.io/scrape", quoted("true"), "")
		set(ann, "prometheus.io/port", quoted(itoa(w.admin)), "")
		set(ann, "prometheus.io/path", strNode("/metrics"), "")
	}
	inits := child(w.podSpec, "initContainers", yaml.SequenceNode)
	inits.Content = append(inits.Content, sidecar(p.opts, w.app.number, w.data, w.admin))
	if p.opts.RoutesConfigMap != "" {
		vols := child(w.podSpec, "volumes", yaml.SequenceNode)
		vols.Content = append(vols.Content, fromTemplate(routesVolume, p.opts.RoutesConfigMap))
	}
}

func (p *plan) hasPolicy(w *workload) bool {
	return slices.ContainsFunc(p.objs, func(o *object) bool {
		return o.kind == "NetworkPolicy" && o.ns == w.obj.ns && o.name == w.obj.name+PolicySuffix
	})
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

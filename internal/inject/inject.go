package inject

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"

	"go.yaml.in/yaml/v3"
)

// Options are what `fenceproxy inject` is told. The zero value of a field
// means its default, as documented on each.
type Options struct {
	// Image is the fenceproxy image. Required.
	Image string
	// RedisURL sets FENCE_REDIS_URL in the sidecar's env; RedisSecret
	// instead reads it from a Secret, "name" or "name:key" (key default
	// DefaultSecretKey). One of the two, or EnvFrom, must give the store.
	RedisURL, RedisSecret string
	// EnvFrom names a ConfigMap whose keys become the sidecar's environment
	// (envFrom); the values inject sets in env win over it.
	EnvFrom string
	// RoutesConfigMap names a ConfigMap holding routes.yaml, mounted at
	// /etc/fenceproxy (FENCE_ROUTES_FILE). Empty: the default rule.
	RoutesConfigMap string
	// AppPorts names the app's port (a container port's name or a number)
	// by workload name; the key "" applies to every workload. Needed only
	// when the pod declares several ports and the Services do not say which
	// one is the app's.
	AppPorts map[string]string
	// DataPort and AdminPort are fenceproxy's ports. 0: the first port from
	// DefaultDataPort (DefaultAdminPort) up that no container of the pod
	// declares.
	DataPort, AdminPort int32
	// MetricsNamespace is the namespace whose pods the NetworkPolicy admits
	// to the admin port (Prometheus). Empty: DefaultMetricsNamespace.
	MetricsNamespace string
	// Workloads limits injection to the Deployments and StatefulSets of
	// these names. Empty: every one.
	Workloads []string
}

// The defaults and names inject uses; the deploy checks know them too.
const (
	SidecarName             = "fenceproxy"
	DataPortName            = "fenced-http"
	AdminPortName           = "fence-admin"
	DefaultDataPort         = 8080
	DefaultAdminPort        = 9090
	DefaultSecretKey        = "url"
	DefaultMetricsNamespace = "monitoring"
	RoutesVolume            = "fenceproxy-routes"
	RoutesDir               = "/etc/fenceproxy"
	// PodLabel marks the pods that carry the sidecar (a NetworkPolicy in
	// front of Redis can select them), as the Kustomize component does.
	PodLabel = "fenceproxy/sidecar"
	// PolicySuffix ends the name of the NetworkPolicy made for a workload.
	PolicySuffix = "-fenceproxy"
)

// ErrNoStore is returned when nothing tells the sidecar where its store is.
var ErrNoStore = errors.New("no store: give --redis-url, --redis-secret or --env-from (a ConfigMap with FENCE_REDIS_URL)")

// document is one document of the stream: its separator line ("" for the
// first), its text, and its tree when it holds an object.
type document struct {
	sep     string
	raw     []byte
	node    *yaml.Node // a DocumentNode, nil for an empty document
	changed bool
	after   []*yaml.Node // objects to write as new documents after this one
}

// object is one Kubernetes object: a document's root mapping, or an item of
// a List.
type object struct {
	doc        *document
	node       *yaml.Node // the object's mapping
	list       *yaml.Node // the List's items sequence, when it is an item
	apiVersion string
	kind       string
	name, ns   string
}

func (o *object) String() string {
	if o.ns == "" {
		return o.kind + "/" + o.name
	}
	return o.kind + "/" + o.ns + "/" + o.name
}

// separator matches a document start or end line (a comment may follow).
var separator = regexp.MustCompile(`(?m)^(?:---|\.\.\.)(?:[ \t].*)?(?:\n|\z)`)

// split cuts a stream at its document start and end lines, keeping each
// line.
func split(in []byte) []*document {
	var docs []*document
	sep, start := "", 0
	for _, loc := range separator.FindAllIndex(in, -1) {
		docs = append(docs, &document{sep: sep, raw: in[start:loc[0]]})
		sep, start = string(in[loc[0]:loc[1]]), loc[1]
	}
	docs = append(docs, &document{sep: sep, raw: in[start:]})
	return docs
}

// Stream injects fenceproxy into the objects of the YAML stream in (see the
// package doc) and returns the stream to write.
func Stream(in []byte, opts Options) ([]byte, error) {
	if opts.Image == "" {
		return nil, errors.New("no image: give --image")
	}
	if opts.RedisURL == "" && opts.RedisSecret == "" && opts.EnvFrom == "" {
		return nil, ErrNoStore
	}
	if opts.RedisURL != "" && opts.RedisSecret != "" {
		return nil, errors.New("give --redis-url or --redis-secret, not both")
	}
	if opts.MetricsNamespace == "" {
		opts.MetricsNamespace = DefaultMetricsNamespace
	}
	docs := split(in)
	var objs []*object
	for i, d := range docs {
		var n yaml.Node
		if err := yaml.Unmarshal(d.raw, &n); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		if n.Kind != yaml.DocumentNode || len(n.Content) == 0 || n.Content[0].Kind != yaml.MappingNode {
			continue // empty, comments only, or not an object: written back as it is
		}
		d.node = &n
		root := n.Content[0]
		o := newObject(d, root, nil)
		if o.kind == "List" || (o.apiVersion == "v1" && len(o.kind) > 4 && o.kind[len(o.kind)-4:] == "List") {
			if items := get(root, "items"); items != nil && items.Kind == yaml.SequenceNode {
				for _, it := range items.Content {
					if it.Kind == yaml.MappingNode {
						objs = append(objs, newObject(d, it, items))
					}
				}
			}
			continue
		}
		objs = append(objs, o)
	}

	p := &plan{opts: opts, objs: objs}
	if err := p.run(); err != nil {
		return nil, err
	}
	return write(docs)
}

func newObject(d *document, m, list *yaml.Node) *object {
	return &object{doc: d, node: m, list: list,
		apiVersion: scalar(m, "apiVersion"), kind: scalar(m, "kind"),
		name: scalar(get(m, "metadata"), "name"), ns: scalar(get(m, "metadata"), "namespace")}
}

// write joins the documents back, re-encoding only those that changed and
// adding the new objects after the document they belong to.
func write(docs []*document) ([]byte, error) {
	var out bytes.Buffer
	for _, d := range docs {
		out.WriteString(d.sep)
		if !d.changed {
			out.Write(d.raw)
		} else {
			if root := d.node.Content[0]; root.Style&yaml.FlowStyle != 0 {
				// JSON in (kubectl get -o json): block YAML out, rather
				// than JSON with block-style insertions.
				block(d.node)
			}
			b, err := encode(d.node)
			if err != nil {
				return nil, err
			}
			out.Write(b)
		}
		for _, n := range d.after {
			if out.Len() > 0 && out.Bytes()[out.Len()-1] != '\n' {
				out.WriteByte('\n')
			}
			b, err := encode(n)
			if err != nil {
				return nil, err
			}
			out.WriteString("---\n")
			out.Write(b)
		}
	}
	return out.Bytes(), nil
}

func encode(n *yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// block drops flow style from a tree (and the quotes JSON puts on every
// key and string; the encoder quotes what needs it).
func block(n *yaml.Node) {
	n.Style &^= yaml.FlowStyle
	if n.Kind == yaml.ScalarNode && n.Style == yaml.DoubleQuotedStyle {
		n.Style = 0
	}
	for _, c := range n.Content {
		block(c)
	}
}

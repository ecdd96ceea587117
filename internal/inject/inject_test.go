package inject

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite testdata/out from the current output")

// Cases are the manifests of testdata/in with the options each is injected
// with; the deploy module's tests run the same cases through the deploy
// checks (see Cases).
func TestGolden(t *testing.T) {
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", "in", c.Name+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			out, err := Stream(in, c.Options)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "out", c.Name+".yaml")
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, want) {
				t.Errorf("output differs from %s (go test -run TestGolden -update to accept):\n%s", golden, out)
			}

			// Injecting twice changes nothing.
			again, err := Stream(out, c.Options)
			if err != nil {
				t.Fatalf("second injection: %v", err)
			}
			if !bytes.Equal(again, out) {
				t.Errorf("a second injection changed the output:\n%s", again)
			}

			// The app's containers are those of the input; the init
			// containers of the input come first, unchanged.
			before, after := workloads(t, in), workloads(t, out)
			if len(before) == 0 || len(after) != len(before) {
				t.Fatalf("workloads: %d in, %d out", len(before), len(after))
			}
			for name, b := range before {
				a := after[name]
				if !reflect.DeepEqual(a.containers, b.containers) {
					t.Errorf("%s: the app's containers changed:\nbefore %v\nafter  %v", name, b.containers, a.containers)
				}
				if len(a.inits) != len(b.inits)+1 || len(b.inits) > 0 && !reflect.DeepEqual(a.inits[:len(b.inits)], b.inits) {
					t.Errorf("%s: init containers: before %v, after %v", name, b.inits, a.inits)
				}
			}

			// Every other document is written back byte for byte.
			kept := 0
			for _, d := range split(in) {
				var head struct{ Kind string }
				if err := yaml.Unmarshal(d.raw, &head); err != nil {
					t.Fatal(err)
				}
				if head.Kind != "Deployment" && head.Kind != "StatefulSet" && head.Kind != "Service" && head.Kind != "List" {
					if !bytes.Contains(out, d.raw) {
						t.Errorf("a document was not passed through byte for byte:\n%s", d.raw)
					}
					kept++
				}
			}
			t.Logf("%d documents passed through", kept)
		})
	}
}

type podParts struct{ containers, inits []any }

// workloads decodes the pod templates of a stream's Deployments and
// StatefulSets (in Lists too), by name.
func workloads(t *testing.T, stream []byte) map[string]podParts {
	t.Helper()
	out := map[string]podParts{}
	dec := yaml.NewDecoder(bytes.NewReader(stream))
	var add func(o map[string]any)
	add = func(o map[string]any) {
		if items, ok := o["items"].([]any); ok {
			for _, it := range items {
				add(it.(map[string]any))
			}
		}
		if o["kind"] != "Deployment" && o["kind"] != "StatefulSet" {
			return
		}
		spec := o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		c, _ := spec["containers"].([]any)
		i, _ := spec["initContainers"].([]any)
		out[o["metadata"].(map[string]any)["name"].(string)] = podParts{c, i}
	}
	for {
		var o map[string]any
		err := dec.Decode(&o)
		if err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatal(err)
		}
		if o != nil {
			add(o)
		}
	}
}

// TestRefusals: what inject cannot do safely is an error that names the
// object and what to give.
func TestRefusals(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "in", name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	opts := Options{Image: "fenceproxy:v0.0.1", RedisURL: "redis://redis:6379/0"}
	withOpts := func(f func(o *Options)) Options { o := opts; f(&o); return o }
	several := read("several-containers")
	cases := []struct {
		name string
		in   string
		opts Options
		want []string
	}{
		{"several ports, no Service", several[:strings.Index(several, "---")], opts,
			[]string{"Deployment/inventory: several ports could be the app's: inventory/http (8000), exporter/metrics (9102); name the one fenceproxy fronts with --app-port inventory=PORT"}},
		{"Service port to another container", strings.Replace(several, "    - name: http\n      port: 8000\n",
			"    - name: http\n      port: 8000\n    - name: metrics\n      port: 9102\n      targetPort: metrics\n", 1), withOpts(func(o *Options) { o.AppPorts = map[string]string{"inventory": "http"} }),
			[]string{"Service/inventory: port metrics targets exporter/metrics (9102) of Deployment/inventory, which fenceproxy does not front"}},
		{"UDP Service port", strings.Replace(several, "    - name: http\n      port: 8000\n",
			"    - name: http\n      port: 8000\n    - name: statsd\n      port: 9125\n      protocol: UDP\n", 1), withOpts(func(o *Options) { o.AppPorts = map[string]string{"": "8000"} }),
			[]string{"Service/inventory: port statsd is UDP"}},
		{"app port not declared", several, withOpts(func(o *Options) { o.AppPorts = map[string]string{"inventory": "web"} }),
			[]string{"--app-port web is no container port of the pod (have inventory/http (8000), exporter/metrics (9102))"}},
		{"no port at all", strings.Replace(read("numeric-port"), "          ports:\n            - containerPort: 8080\n", "", 1), opts,
			[]string{"Deployment/shop/orders: no container declares a TCP port", "--app-port orders=PORT"}},
		{"half the Service", read("two-deployments"), withOpts(func(o *Options) { o.Workloads = []string{"search-canary"} }),
			[]string{"Service/search: selects Deployment/search-canary, which get fenceproxy, and Deployment/search-stable, which do not"}},
		{"unknown workload", read("two-deployments"), withOpts(func(o *Options) { o.Workloads = []string{"serch-canary"} }),
			[]string{"--workload serch-canary: no Deployment or StatefulSet of that name"}},
		{"host network", strings.Replace(read("numeric-port"), "      containers:", "      hostNetwork: true\n      containers:", 1), opts,
			[]string{"Deployment/shop/orders: spec.template.spec.hostNetwork is true"}},
		{"hostPort", strings.Replace(read("numeric-port"), "- containerPort: 8080", "- containerPort: 8080\n              hostPort: 80", 1), opts,
			[]string{"container orders port 8080 has hostPort 80"}},
		{"data port taken", read("numeric-port"), withOpts(func(o *Options) { o.DataPort = 8080 }),
			[]string{"--port 8080 is already a port of the pod"}},
		{"fenceproxy as a regular container", strings.Replace(read("numeric-port"), "- name: orders\n          image", "- name: fenceproxy\n          image", 1), opts,
			[]string{"container fenceproxy is a regular container"}},
		{"a policy of the team admits the app's port", read("numeric-port") + "---\n" + teamPolicy("    - ports:\n        - port: 8080\n"), opts,
			[]string{"NetworkPolicy/shop/orders-ingress: ingress[0] admits the app's port orders/8080 of Deployment/shop/orders: policies add up"}},
		{"a policy of the team admits every port", read("numeric-port") + "---\n" + teamPolicy("    - from:\n        - podSelector: {}\n"), opts,
			[]string{"NetworkPolicy/shop/orders-ingress: ingress[0] admits every port of the pods of Deployment/shop/orders"}},
		{"no store", read("numeric-port"), Options{Image: "fenceproxy:v0.0.1"}, []string{ErrNoStore.Error()}},
		{"not YAML", "kind: [Deployment\n", opts, []string{"document 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Stream([]byte(tc.in), tc.opts)
			if err == nil {
				t.Fatalf("no error; output:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			if tc.name == "no store" && !errors.Is(err, ErrNoStore) {
				t.Errorf("want ErrNoStore, got %v", err)
			}
		})
	}
}

// teamPolicy is a NetworkPolicy a team wrote for the orders pods, with the
// given ingress rules.
func teamPolicy(rules string) string {
	return "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: orders-ingress\n  namespace: shop\nspec:\n  podSelector:\n    matchLabels:\n      app: orders\n  ingress:\n" + rules
}

// TestTeamPolicyOnOtherPorts: a policy of the team that admits other ports
// (not the app's) is left as it is.
func TestTeamPolicyOnOtherPorts(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "in", "numeric-port.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	policy := teamPolicy("    - ports:\n        - port: 9100\n")
	out, err := Stream(append(in, "---\n"+policy...), Options{Image: "fenceproxy:v0.0.1", RedisURL: "redis://r:6379/0"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte(policy)) {
		t.Errorf("the team's policy changed:\n%s", out)
	}
}

// TestPassThrough: a stream without workloads comes back byte for byte,
// comments, separators and odd spacing included.
func TestPassThrough(t *testing.T) {
	in := "# leading comment\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}   # trailing\ndata:\n  k:   'v'\n--- # a comment on the separator\n\n...\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: external\nspec:\n  type: ExternalName\n  externalName: example.com\n"
	out, err := Stream([]byte(in), Options{Image: "fenceproxy:v0.0.1", RedisURL: "redis://r:6379/0"})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("changed:\n%s", out)
	}
}

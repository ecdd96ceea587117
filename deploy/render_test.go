package deploy

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestEveryKustomization renders every kustomization under deploy/ with
// Kustomize, decodes every object strictly and runs Check and CheckAuthz on
// it, as `cmd/render -check` does: no errors, and no warnings either (the
// manifests shipped here are the hardened example). A Component
// cannot be built alone: it must be included by a kustomization that is.
func TestEveryKustomization(t *testing.T) {
	ks, err := FindKustomizations(".")
	if err != nil {
		t.Fatal(err)
	}
	var built, components []string
	included := map[string]bool{}
	for _, k := range ks {
		for _, c := range k.Components {
			included[filepath.Clean(c)] = true
		}
		switch k.Kind {
		case "Component":
			components = append(components, k.Dir)
			continue
		case "Kustomization":
		default:
			t.Errorf("%s: unknown kustomization kind %q", k.Dir, k.Kind)
			continue
		}
		built = append(built, k.Dir)
		t.Run(filepath.ToSlash(k.Dir), func(t *testing.T) {
			m, err := Build(k.Dir)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := Decode(m)
			if err != nil {
				t.Fatalf("strict decoding:\n%v", err)
			}
			if len(objs) == 0 {
				t.Fatal("renders no objects")
			}
			errs, warns := checkBoth(objs)
			if len(errs) > 0 {
				t.Errorf("checks, errors:\n%v", errors.Join(errs...))
			}
			if len(warns) > 0 {
				t.Errorf("checks, warnings:\n%v", errors.Join(warns...))
			}
		})
	}
	for _, c := range components {
		if !included[filepath.Clean(c)] {
			t.Errorf("component %s is included by no kustomization under deploy/, so nothing checks it", c)
		}
	}
	if !slices.Contains(components, "base") || !slices.Contains(built, filepath.Join("examples", "sample-app")) {
		t.Errorf("want the component base/ and the overlay examples/sample-app/; found components %v, kustomizations %v", components, built)
	}
}

func TestDecodeIsStrict(t *testing.T) {
	const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: d
spec:
  selector:
    matchLabels: {app: d}
  template:
    metadata:
      labels: {app: d}
    spec:
      containers:
        - name: c
          image: x:1
`
	if _, err := DecodeYAML([]byte(deployment)); err != nil {
		t.Fatalf("a valid Deployment: %v", err)
	}
	cases := []struct{ name, doc, want string }{
		{"unknown field", strings.Replace(deployment, "image: x:1", "image: x:1\n          imagePullPolice: Always", 1), "unknown field"},
		{"field in another case", strings.Replace(deployment, "image: x:1", "Image: x:1", 1), "unknown field"},
		{"duplicate field", strings.Replace(deployment, "image: x:1", "image: x:1\n          image: x:2", 1), "already set"},
		{"misplaced field", strings.Replace(deployment, "  selector:", "  restartPolicy: Always\n  selector:", 1), "unknown field"},
		{"wrong type", strings.Replace(deployment, "name: c", "name: [c]", 1), "cannot unmarshal"},
		{"old API version", strings.Replace(deployment, "apps/v1", "extensions/v1beta1", 1), "unknown kind"},
		{"custom resource", "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n  name: m\n", "unknown kind"},
		{"no kind", "apiVersion: v1\nmetadata:\n  name: m\n", "unknown kind"},
	}
	// JSON, as Kustomize hands it over, is held to the same rules.
	for _, tc := range []struct{ name, doc, want string }{
		{"json unknown field", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"date":{}}`, "unknown field"},
		{"json field in another case", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"Data":{}}`, "unknown field"},
		{"json duplicate field", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{},"data":{}}`, "duplicate field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeJSON([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeYAML([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}

// TestRenderIsYAMLOfTheObjects: what cmd/render prints decodes to the same
// objects Build yields, namespaces first (so `kubectl apply -f -` works).
func TestRenderIsYAMLOfTheObjects(t *testing.T) {
	dir := filepath.Join("examples", "sample-app")
	out, err := Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, doc := range splitYAML(out) {
		o, err := DecodeYAML(doc)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, o.String())
	}
	m, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(objs) {
		t.Fatalf("render printed %d objects, Build has %d", len(names), len(objs))
	}
	if !strings.HasPrefix(names[0], "Namespace/") {
		t.Errorf("the first object is %s, want the Namespace", names[0])
	}
}

// splitYAML splits a YAML stream, as Render prints it, into its documents.
func splitYAML(stream []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(stream, []byte("\n---\n")) {
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

// TestMissingEnvGenerator: a kustomization that includes the component but
// forgets the fenceproxy-env generator fails with ErrNoEnvGenerator, which
// says what to add, instead of Kustomize's bare "cannot merge or replace".
func TestMissingEnvGenerator(t *testing.T) {
	dir := t.TempDir()
	base, err := filepath.Abs("base")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, base)
	if err != nil {
		t.Fatal(err)
	}
	app, err := os.ReadFile(filepath.Join(sampleDir, "app.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kz := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - app.yaml\ncomponents:\n  - " + filepath.ToSlash(rel) + "\n"
	for name, data := range map[string]string{"kustomization.yaml": kz, "app.yaml": string(app)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = Build(dir)
	if !errors.Is(err, ErrNoEnvGenerator) {
		t.Fatalf("want ErrNoEnvGenerator, got %v", err)
	}
	if !strings.Contains(err.Error(), "- name: fenceproxy-env") {
		t.Errorf("the error does not show the generator to add: %v", err)
	}
}

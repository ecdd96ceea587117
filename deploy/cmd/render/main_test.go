package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kustomization writes a kustomization of one Deployment, whose pod spec
// is spec (YAML indented for the pod spec), into a temporary directory.
func kustomization(t *testing.T, spec string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: demo\nresources:\n  - app.yaml\n",
		"app.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: app
spec:
  selector:
    matchLabels: {app: app}
  template:
    metadata:
      labels: {app: app}
    spec:
` + spec,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// An unhardened container: no securityContext, no resources.
const plainContainer = `      containers:
        - name: app
          image: example.com/app:1.0
`

// TestCheckLevels: -check prints errors and warnings, each labelled, and
// fails on errors only.
func TestCheckLevels(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dir      string
		fail     bool
		want     []string
		wantNone string
	}{
		{"the sample app", filepath.Join("..", "..", "examples", "sample-app"), false,
			[]string{"checks passed (0 warnings)"}, "warning:"},
		{"the authz workload", filepath.Join("..", "..", "integrations", "authz"), false,
			[]string{"checks passed (0 warnings)"}, "warning:"},
		{"hardening warnings only", kustomization(t, plainContainer), false,
			[]string{": warning: Deployment/demo/app: container app: securityContext.runAsNonRoot must be true.", "checks passed ("}, "error:"},
		// A file: what fenceproxy inject wrote for a team's manifests (its
		// app containers draw hardening warnings; the autoscaler is named).
		{"an injected file", filepath.Join("..", "..", "..", "internal", "inject", "testdata", "out", "named-port.yaml"), false,
			[]string{"not checked: HorizontalPodAutoscaler/payments", "checks passed ("}, "error:"},
		{"an error", kustomization(t, "      hostNetwork: true\n"+plainContainer), true,
			[]string{": error: Deployment/demo/app: spec.template.spec.hostNetwork is true", ": warning: Deployment/demo/app: container app: securityContext.runAsNonRoot must be true.", "1 error, 8 warnings"}, "checks passed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run([]string{"-check", tc.dir}, &stdout, &stderr)
			out := stderr.String()
			if err != nil {
				out += "render: " + err.Error() + "\n"
			}
			t.Log(out)
			if (err != nil) != tc.fail {
				t.Errorf("run returned %v, want failure %v", err, tc.fail)
			}
			if !strings.Contains(stdout.String(), "kind: Deployment") {
				t.Errorf("stdout lacks the manifests:\n%s", stdout.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("want %q in the output", w)
				}
			}
			if strings.Contains(out, tc.wantNone) {
				t.Errorf("want no %q in the output", tc.wantNone)
			}
		})
	}
}

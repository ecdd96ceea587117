package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readmeRoutes is the routes file of the README's dry run, as a reader
// copies it: the YAML block that starts with "# routes.yaml".
func readmeRoutes(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "```yaml\n# routes.yaml")
	block, _, closed := strings.Cut(after, "```")
	if !ok || !closed {
		t.Fatal("README.md has no ```yaml block starting with # routes.yaml")
	}
	return "# routes.yaml" + block
}

// The README's dry run, copied verbatim, refuses nothing: the real binary
// with its routes file forwards every write a service sees on its first
// day (with a token, without one, stale, on a route and on no route), and
// counts what it would have refused.
func TestReadmeDryRunRefusesNothing(t *testing.T) {
	bin := buildBinary(t)
	up := newCountingUpstream(t)
	r := startReplica(t, bin, map[string]string{
		"FENCE_UPSTREAM_URL": up.URL,
		"FENCE_BOLT_PATH":    filepath.Join(t.TempDir(), "fenceproxy.db"),
		"FENCE_ROUTES_FILE":  writeRoutes(t, readmeRoutes(t)),
	})
	for _, w := range []struct{ method, path, token string }{
		{"POST", "/orders", ""}, // no route: the default rule
		{"POST", "/orders", "3"},
		{"PUT", "/orders/42", ""},
		{"PUT", "/orders/42", "5"},
		{"PATCH", "/orders/42", "4"}, // stale
		{"DELETE", "/orders/42", "x"},
		{"PUT", "/orders/007", "5"}, // {orderID:uint} refuses 007: the default rule
		{"POST", "/reports/daily", ""},
		{"GET", "/orders/42", ""},
		{"DELETE", "/customers/9", "1"}, // stale on the default rule: its mark is 5
		{"DELETE", "/customers/9", "0"}, // stale again
	} {
		req, _ := http.NewRequest(w.method, r.data+w.path, strings.NewReader("{}"))
		if w.token != "" {
			req.Header.Set("Fencing-Token", w.token)
		}
		before := up.n.Load()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || up.n.Load()-before != 1 {
			t.Errorf("%s %s token %q: %d, forwarded %d; the dry run must forward it",
				w.method, w.path, w.token, resp.StatusCode, up.n.Load()-before)
		}
	}
	for sample, want := range map[string]float64{
		`fenceproxy_requests_total{decision="would_missing",route="order-writes"}`:   1,
		`fenceproxy_requests_total{decision="would_stale",route="order-writes"}`:     1,
		`fenceproxy_requests_total{decision="would_missing",route="default"}`:        1,
		`fenceproxy_requests_total{decision="would_malformed",route="order-writes"}`: 1,
		`fenceproxy_requests_total{decision="would_stale",route="default"}`:          2,
	} {
		if got := r.metric(t, sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
}

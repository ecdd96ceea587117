package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

func requestsOf(m *Metrics, route, decision string) float64 {
	return testutil.ToFloat64(m.requests.WithLabelValues(route, decision))
}

const dryRunRoutes = `
routes:
  - name: dry
    path: /dry/{id}
    resource: dry/{id}
    enforce: false
  - name: enforced
    path: /on/{id}
    resource: on/{id}
`

// On a dry-run route every decision is made and counted, and every request
// is forwarded: a refusal as its would_ twin. The mark still moves only
// forward, and an enforcing route beside it still refuses.
func TestDryRun(t *testing.T) {
	store := memstore.New()
	f := newFixture(t, dryRunRoutes, store)
	tests := []struct {
		name     string
		target   string
		headers  []string
		status   int
		decision string
	}{
		{"admitted", "/dry/1", []string{"Fencing-Token", "5"}, 200, "admitted"},
		{"stale", "/dry/1", []string{"Fencing-Token", "4"}, 200, "would_stale"},
		{"missing", "/dry/1", nil, 200, "would_missing"},
		{"malformed", "/dry/1", []string{"Fencing-Token", "05"}, 200, "would_malformed"},
		{"newer", "/dry/1", []string{"Fencing-Token", "9"}, 200, "admitted"},
		{"enforced stale refused", "/on/1", []string{"Fencing-Token", "0"}, 200, "admitted"},
		{"enforced refused", "/on/1", nil, http.StatusPreconditionRequired, "missing"},
	}
	for _, tt := range tests {
		route := strings.Split(tt.target, "/")[1]
		if route == "on" {
			route = "enforced"
		}
		before := requestsOf(f.metrics, route, tt.decision)
		resp, body := f.do("PUT", tt.target, tt.headers...)
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d, want %d (%s)", tt.name, resp.StatusCode, tt.status, body)
		}
		if got := requestsOf(f.metrics, route, tt.decision) - before; got != 1 {
			t.Errorf("%s: %s counted %v times, want 1", tt.name, tt.decision, got)
		}
	}
	// Everything on the dry-run route reached the upstream; of the
	// enforcing route only the admitted request.
	if got := len(f.up.received()); got != 6 {
		t.Errorf("upstream received %d requests, want 6: %+v", got, f.up.received())
	}
	// The stale dry-run request did not move the mark back.
	m, ok, err := store.Mark(t.Context(), "dry/1")
	if err != nil || !ok || m != 9 {
		t.Errorf("mark of dry/1 = %+v %v %v, want 9", m, ok, err)
	}
	// An enforcing route has no would_ series; a dry-run route has them at 0 from the start.
	if n := testutil.CollectAndCount(f.metrics.requests, "fenceproxy_requests_total"); n != 3*int(numRealDecisions)+int(numRealDecisions)-2 {
		t.Errorf("%d request series, want %d", n, 3*int(numRealDecisions)+int(numRealDecisions)-2)
	}
}

// A dry-run route forwards when the store does not answer, and counts
// would_unavailable; the body that could not be read is still refused
// (there is nothing whole to forward).
func TestDryRunStoreDown(t *testing.T) {
	store := memstore.New()
	f := newFixture(t, dryRunRoutes, store)
	store.Close()
	resp, body := f.do("PUT", "/dry/1", "Fencing-Token", "5")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200 (%s)", resp.StatusCode, body)
	}
	if got := requestsOf(f.metrics, "dry", "would_unavailable"); got != 1 {
		t.Errorf("would_unavailable = %v, want 1", got)
	}
	resp, body = f.do("PUT", "/on/1", "Fencing-Token", "5")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("enforced route with the store down: status %d (%s)", resp.StatusCode, body)
	}
}

// SetRoutes replaces the table whole: a route added is fenced, a route
// made dry-run forwards, and the marks are the store's, untouched.
func TestSetRoutes(t *testing.T) {
	store := memstore.New()
	f := newFixture(t, "routes:\n  - {name: a, path: '/a/{id}', resource: 'a/{id}'}\n", store)
	p := f.front.Config.Handler.(*Proxy)
	if resp, _ := f.do("PUT", "/a/1", "Fencing-Token", "7"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if resp, _ := f.do("PUT", "/b/1"); resp.StatusCode != 428 { // the default rule fences it
		t.Fatalf("before: /b/1 status %d, want 428", resp.StatusCode)
	}
	rs, err := config.ParseRoutes([]byte("routes:\n  - {name: a, path: '/a/{id}', resource: 'a/{id}', enforce: false}\n" +
		"  - {name: b, path: '/b/*', fence: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetRoutes(rs); err != nil {
		t.Fatal(err)
	}
	if resp, _ := f.do("PUT", "/b/1"); resp.StatusCode != 200 {
		t.Errorf("after: /b/1 status %d, want 200 (unfenced)", resp.StatusCode)
	}
	if resp, _ := f.do("PUT", "/a/1", "Fencing-Token", "3"); resp.StatusCode != 200 {
		t.Errorf("after: a stale token on a dry-run route: status %d, want 200", resp.StatusCode)
	}
	if got := requestsOf(f.metrics, "a", "would_stale"); got != 1 {
		t.Errorf("would_stale = %v, want 1", got)
	}
	m, _, _ := store.Mark(t.Context(), "a/1")
	if m != 7 {
		t.Errorf("mark %d, want 7", m)
	}
	// A table chi refuses keeps the old one.
	bad := config.Routes{Routes: []config.Route{{Name: "x", Methods: []string{"PUT"}, Path: "/{", Pattern: "/{", Fence: true,
		Resource: config.Template{Raw: "x", Parts: []config.Part{{Kind: config.PartLiteral, Value: "x"}}}}}}
	if err := p.SetRoutes(bad); err == nil {
		t.Error("SetRoutes accepted a pattern chi refuses")
	}
	if resp, _ := f.do("PUT", "/b/1"); resp.StatusCode != 200 {
		t.Errorf("after a refused table: /b/1 status %d, want 200", resp.StatusCode)
	}
}

// A dry-run default rule does not forward what it cannot attribute to a
// route: an ambiguous path (no canonical path to send; the upstream might
// decode it onto an enforcing route) and a lower-case method fenced once
// upper-cased (the upstream might upper-case it onto the enforcing route)
// are refused as when enforcing, and nothing reaches the upstream.
func TestDryRunDefaultKeepsEnforcingRoutes(t *testing.T) {
	f := newFixture(t, "default:\n  enforce: false\nroutes:\n  - {name: o, path: '/orders/{id}', resource: 'o/{id}'}\n", nil)
	for _, c := range []struct{ method, target string }{{"PUT", "/x/..%2Forders/2"}, {"put", "/orders/2"}} {
		resp, body := f.do(c.method, c.target)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, TypeBadRequest) {
			t.Errorf("%s %s: status %d, want 400 bad-request (%s)", c.method, c.target, resp.StatusCode, body)
		}
	}
	if got := requestsOf(f.metrics, "default", "bad_request"); got != 2 {
		t.Errorf("bad_request on the default rule = %v, want 2", got)
	}
	if got := f.up.received(); len(got) != 0 {
		t.Errorf("upstream received %+v, want nothing", got)
	}
	// The default rule's own refusals stay dry-run.
	if resp, body := f.do("PUT", "/elsewhere"); resp.StatusCode != 200 {
		t.Errorf("PUT /elsewhere: status %d, want 200 (dry run) (%s)", resp.StatusCode, body)
	}
	if got := requestsOf(f.metrics, "default", "would_missing"); got != 1 {
		t.Errorf("would_missing on the default rule = %v, want 1", got)
	}
}

package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

// authzFixture is the authorization handler on a real listener.
func authzFixture(t *testing.T, routesYAML, prefix string) (*httptest.Server, *Metrics, *memstore.Store) {
	t.Helper()
	rs, err := config.ParseRoutes([]byte(routesYAML))
	if err != nil {
		t.Fatal(err)
	}
	store, m := memstore.New(), NewMetrics()
	a, err := NewAuthz(Options{Routes: rs, Store: store, Metrics: m}, prefix)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return srv, m, store
}

func ask(t *testing.T, srv *httptest.Server, method, path string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// The authorization mode decides as the proxy does, about the request the
// headers describe: 200 and an empty body to go on, the proxy's problem to
// refuse, with the decision and the problem in headers for a proxy that
// drops the body.
func TestAuthz(t *testing.T) {
	srv, m, store := authzFixture(t, ordersRoutes+"  - {name: dry, path: '/dry/{id}', resource: 'dry/{id}', enforce: false}\n", "")
	tests := []struct {
		name     string
		method   string // the authorization request's own method
		path     string // its own path
		headers  []string
		status   int
		decision string
		typ      string
	}{
		{"admitted", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/orders/42", "Fencing-Token", "7"}, 200, "admitted", ""},
		{"same token again", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/orders/42", "Fencing-Token", "7"}, 200, "admitted", ""},
		{"stale", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/orders/42", "Fencing-Token", "6"}, 409, "stale", TypeStaleToken},
		{"forwarded headers (Traefik)", "GET", "/auth", []string{"X-Forwarded-Method", "PUT", "X-Forwarded-Uri", "/orders/42", "Fencing-Token", "5"}, 409, "stale", TypeStaleToken},
		{"unfenced method", "GET", "/auth", []string{"X-Original-Method", "GET", "X-Original-URI", "/orders/42"}, 200, "unfenced", ""},
		{"missing", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/orders/42"}, 428, "missing", TypeTokenRequired},
		{"malformed", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/orders/42", "Fencing-Token", "x"}, 400, "malformed", TypeTokenMalformed},
		{"dot segments", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/orders/7/../42", "Fencing-Token", "9"}, 400, "bad_request", TypeBadRequest},
		{"needless escape", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/orders/%34%32", "Fencing-Token", "9"}, 400, "bad_request", TypeBadRequest},
		{"doubled slash", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "//orders/42", "Fencing-Token", "9"}, 400, "bad_request", TypeBadRequest},
		{"escaped non-ASCII is canonical", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/orders/caf%C3%A9", "Fencing-Token", "1"}, 200, "admitted", ""},
		{"trailing slash kept", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/orders/45/", "Fencing-Token", "1"}, 200, "admitted", ""},
		{"unfenced read with dot segments", "GET", "/auth", []string{"X-Original-Method", "GET", "X-Original-URI", "/orders/7/../42"}, 200, "unfenced", ""},
		{"ambiguous path", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/orders/42%2F43", "Fencing-Token", "9"}, 400, "bad_request", TypeBadRequest},
		{"query names the resource", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/tenants/items?item=3", "X-Tenant", "acme", "Fencing-Token", "2"}, 200, "admitted", ""},
		{"own method and path", "PUT", "/orders/43", []string{"Fencing-Token", "1"}, 200, "admitted", ""},
		{"original and forwarded disagree", "GET", "/auth", []string{"X-Original-URI", "/reports/x", "X-Forwarded-Uri", "/orders/42", "X-Original-Method", "PUT"}, 400, "bad_request", TypeBadRequest},
		{"original and forwarded agree", "GET", "/auth", []string{"X-Original-URI", "/orders/44", "X-Forwarded-Uri", "/orders/44", "X-Original-Method", "PUT", "Fencing-Token", "1"}, 200, "admitted", ""},
		{"repeated original URI", "GET", "/auth", []string{"X-Original-URI", "/orders/44", "X-Original-URI", "/reports/1", "X-Original-Method", "PUT"}, 400, "bad_request", TypeBadRequest},
		{"absolute URI", "GET", "/auth", []string{"X-Original-URI", "http://evil/orders/1", "X-Original-Method", "PUT"}, 400, "bad_request", TypeBadRequest},
		{"method not a token", "GET", "/auth", []string{"X-Original-URI", "/orders/1", "X-Original-Method", "P UT"}, 400, "bad_request", TypeBadRequest},
		{"dry run admitted", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/dry/1", "Fencing-Token", "0"}, 200, "admitted", ""},
		{"dry run", "GET", "/auth", []string{"X-Original-Method", "PUT", "X-Original-URI", "/dry/1"}, 200, "would_missing", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := ask(t, srv, tt.method, tt.path, tt.headers...)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if got := resp.Header.Get(HeaderDecision); got != tt.decision {
				t.Errorf("%s = %q, want %q", HeaderDecision, got, tt.decision)
			}
			if tt.status == 200 {
				if body != "" || resp.Header.Get(HeaderProblem) != "" {
					t.Errorf("an allowed answer has a body %q or a problem header", body)
				}
				return
			}
			p := decodeProblem(t, resp, body)
			if p.Type != tt.typ {
				t.Errorf("type %q, want %q", p.Type, tt.typ)
			}
			// The header carries the body, on one line.
			if h := resp.Header.Get(HeaderProblem); h+"\n" != body {
				t.Errorf("%s = %q, body %q", HeaderProblem, h, body)
			}
		})
	}
	if got := requestsOf(m, "order-writes", "stale"); got != 2 {
		t.Errorf("stale counted %v, want 2", got)
	}
	if mark, _, _ := store.Mark(t.Context(), "orders/42"); mark != 7 {
		t.Errorf("mark %d, want 7", mark)
	}
	if _, ok, _ := store.Mark(t.Context(), "reports/x"); ok {
		t.Error("an ambiguous question moved a mark")
	}
}

// Envoy's HTTP ext_authz sends the original path after its path_prefix.
func TestAuthzPathPrefix(t *testing.T) {
	srv, _, _ := authzFixture(t, ordersRoutes, "/fence/")
	tests := []struct {
		path, token string
		status      int
		typ         string
	}{
		{"/fence/orders/1", "3", 200, ""},
		{"/fence/orders/1?x=1", "3", 200, ""},
		{"/fence/orders/1", "2", 409, TypeStaleToken},
		{"/orders/1", "3", 400, TypeBadRequest},      // no prefix
		{"/fenceorders/1", "3", 400, TypeBadRequest}, // the prefix is whole segments
		{"/fence/orders/1%2F2", "3", 400, TypeBadRequest},
	}
	for _, tt := range tests {
		resp, body := ask(t, srv, "PUT", tt.path, "Fencing-Token", tt.token)
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.path, resp.StatusCode, tt.status, body)
			continue
		}
		if tt.typ != "" {
			var p problemBody
			_ = json.Unmarshal([]byte(body), &p)
			if p.Type != tt.typ || !strings.Contains(resp.Header.Get(HeaderProblem), tt.typ) {
				t.Errorf("%s: type %q, want %q", tt.path, p.Type, tt.typ)
			}
		}
	}
}

// With a dry-run default rule, a question the authorization mode cannot
// attribute to a route (an ambiguous original request, a lower-case method
// fenced once upper-cased) is still refused: answering 200 would let the
// asking proxy pass the request by an enforcing route.
func TestAuthzDryRunDefaultKeepsEnforcingRoutes(t *testing.T) {
	srv, _, _ := authzFixture(t, "default:\n  enforce: false\nroutes:\n  - {name: o, path: '/orders/{id}', resource: 'o/{id}'}\n", "")
	for _, h := range [][]string{
		{"X-Original-Method", "PUT", "X-Forwarded-Method", "GET", "X-Original-Uri", "/orders/1"},
		{"X-Original-Method", "put", "X-Original-Uri", "/orders/1"},
		{"X-Original-Method", "PUT", "X-Original-Uri", "/x/..%2Forders/1"},
	} {
		resp, body := ask(t, srv, "GET", "/auth", h...)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get(HeaderDecision) != "bad_request" {
			t.Errorf("%q: status %d, %s %q, want 400 bad_request (%s)", h, resp.StatusCode, HeaderDecision,
				resp.Header.Get(HeaderDecision), body)
		}
	}
}

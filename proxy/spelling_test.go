package proxy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

// Spellings of a fenced request that common upstream frameworks read as the
// same request must not escape its fence.

const spellingRoutes = `
routes:
  - name: orders
    methods: [PUT, DELETE]
    path: /orders/{id:uint}
    resource: orders/{id}
  - name: docs
    path: /Docs/{name}
    case: insensitive
    resource: docs/{name}
  - name: dav
    methods: [MKCOL, MOVE, COPY, PROPPATCH, LOCK, MERGE]
    path: /dav/*
    resource: dav/{*}
  - name: tenant
    path: /tenants/items
    resource: "t/{header:X-Tenant}"
  - name: plain
    path: /plain/{name}
    resource: plain/{name}
  - name: exact
    path: /exact/{name}
    case: sensitive
    resource: exact/{name}
`

func TestSpellingsThatEscapedTheirFence(t *testing.T) {
	f := newFixture(t, spellingRoutes, nil)
	setup := []struct{ method, target string }{
		{"PUT", "/orders/7"},
		{"PUT", "/docs/report"},
		{"MKCOL", "/dav/a"},
		{"POST", "/default"},
	}
	for _, s := range setup {
		if resp, body := f.do(s.method, s.target, "Fencing-Token", "50", "X-Tenant", "a"); resp.StatusCode != 200 {
			t.Fatalf("setup %s %s: %d %s", s.method, s.target, resp.StatusCode, body)
		}
	}
	tests := []struct {
		name, method, target string
		headers              []string // besides the stale token
		status               int
		resource             string // for 409: the mark that refused it
		detail               string
	}{
		{"lower-case method, default rule", "put", "/default", nil, 400, "", "not in upper case"},
		{"mixed-case method, route", "Put", "/orders/7", nil, 400, "", "not in upper case"},
		{"lower-case WebDAV method", "mkcol", "/dav/a", nil, 400, "", "not in upper case"},
		{"upper-case path, insensitive route", "PUT", "/DOCS/Report", nil, 409, "docs/report", ""},
		{"mixed-case path", "PUT", "/dOcS/rEpOrT", nil, 409, "docs/report", ""},
		{"leading zero", "PUT", "/orders/07", nil, 400, "", "{id} must be a canonical unsigned integer"},
		{"plus sign", "PUT", "/orders/+7", nil, 400, "", "{id} must be a canonical unsigned integer"},
		{"encoded plus sign", "PUT", "/orders/%2B7", nil, 400, "", "canonical unsigned integer"},
		{"decimal point", "PUT", "/orders/7.0", nil, 400, "", "canonical unsigned integer"},
		{"space", "PUT", "/orders/%207", nil, 400, "", "canonical unsigned integer"},
		{"out of range", "PUT", "/orders/18446744073709551616", nil, 400, "", "canonical unsigned integer"},
		{"not a number", "PUT", "/orders/seven", nil, 400, "", "canonical unsigned integer"},
		{"canonical", "PUT", "/orders/7", nil, 409, "orders/7", ""},
		{"upper-case path, default case", "PUT", "/ORDERS/7", nil, 409, "orders/7", ""},
		{"WebDAV method", "MOVE", "/dav/a", nil, 409, "dav/a", ""},
		{"comma list in template header", "PUT", "/tenants/items", []string{"X-Tenant", "a, z"}, 400, "", "X-Tenant is a comma-separated list"},
		{"path parameter too long", "PUT", "/plain/" + strings.Repeat("x", MaxResourceLen), nil, 400, "", "longer than 1024 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.up.received())
			resp, body := f.do(tc.method, tc.target, append([]string{"Fencing-Token", "41"}, tc.headers...)...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			p := decodeProblem(t, resp, body)
			if tc.resource != "" && p.Resource != tc.resource {
				t.Errorf("fenced as %q, want %q", p.Resource, tc.resource)
			}
			if !strings.Contains(p.Detail, tc.detail) {
				t.Errorf("detail %q lacks %q", p.Detail, tc.detail)
			}
			if tc.status == 400 && p.Type != TypeBadRequest {
				t.Errorf("type %q", p.Type)
			}
			if n := len(f.up.received()) - before; n != 0 {
				t.Fatalf("upstream received %d requests", n)
			}
		})
	}
}

// What is not fenced in upper case stays forwarded in lower case, and a
// case-insensitive route forwards the path as sent (the upstream serves it
// its own way), fencing it under the folded name.
func TestSpellingsStillForwarded(t *testing.T) {
	f := newFixture(t, spellingRoutes, nil)
	for _, tc := range []struct{ method, target, token, path string }{
		{"get", "/orders/7", "", "/orders/7"},
		{"GET", "/orders/07", "", "/orders/07"}, // GET is not fenced here
		{"PUT", "/DOCS/Report", "3", "/DOCS/Report"},
		{"PROPFIND", "/dav/a", "", "/dav/a"}, // not a fenced method of the route: the default rule does not fence it
		{"PUT", "/exact/Ab", "4", "/exact/Ab"},
	} {
		headers := []string{}
		if tc.token != "" {
			headers = append(headers, "Fencing-Token", tc.token)
		}
		resp, body := f.do(tc.method, tc.target, headers...)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %s", tc.method, tc.target, resp.StatusCode, body)
		}
		got := f.up.received()
		if last := got[len(got)-1]; last.Method != tc.method || last.Path != tc.path {
			t.Fatalf("%s %s reached the upstream as %s %s", tc.method, tc.target, last.Method, last.Path)
		}
	}
	if m, ok, _ := f.store.Mark(t.Context(), "docs/report"); !ok || m != 3 {
		t.Fatalf("the folded resource docs/report has mark %d (%v), want 3", m, ok)
	}
	// A case-sensitive route keeps the name as sent, and a spelling it does
	// not match falls to the default rule.
	if m, ok, _ := f.store.Mark(t.Context(), "exact/Ab"); !ok || m != 4 {
		t.Fatalf("exact/Ab has mark %d (%v), want 4", m, ok)
	}
	if resp, body := f.do("PUT", "/EXACT/Ab", "Fencing-Token", "1"); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if _, ok, _ := f.store.Mark(t.Context(), "default"); !ok {
		t.Fatal("/EXACT/Ab was not fenced by the default rule")
	}
}

// Only admitted names are interned: a client inventing names that are
// refused leaves the cache as it was. (Before, 200 refused requests with
// 1 MiB ids kept 196 MiB live.)
func TestRefusedNamesAreNotInterned(t *testing.T) {
	f := newFixture(t, spellingRoutes, failingStore{err: fencestore.Unavailable(errors.New("down"))})
	p := f.front.Config.Handler.(*Proxy)
	rt, rctx := p.table.Load().match("PUT", "/plain/x")
	p.table.Load().release(rctx)
	for i := range 50 {
		name := "/plain/" + strings.Repeat("n", 900) + strconv.Itoa(i)
		if resp, body := f.do("PUT", name, "Fencing-Token", "7"); resp.StatusCode != 503 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	rt.names.mu.RLock()
	n := len(rt.names.m)
	rt.names.mu.RUnlock()
	if n != 0 {
		t.Fatalf("%d names interned after refusals", n)
	}

	f = newFixture(t, spellingRoutes, memstore.New())
	p = f.front.Config.Handler.(*Proxy)
	if resp, body := f.do("PUT", "/plain/kept", "Fencing-Token", "7"); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	rt, rctx = p.table.Load().match("PUT", "/plain/x")
	p.table.Load().release(rctx)
	rt.names.mu.RLock()
	_, kept := rt.names.m["plain/kept"]
	rt.names.mu.RUnlock()
	if !kept {
		t.Fatal("an admitted name was not interned")
	}
}

// failingStore answers every admission with err.
type failingStore struct{ err error }

func (s failingStore) Admit(context.Context, fencestore.Admission) (fencestore.Decision, error) {
	return fencestore.Decision{}, s.err
}
func (s failingStore) Mark(context.Context, string) (uint64, bool, error)     { return 0, false, s.err }
func (s failingStore) Ping(context.Context) error                             { return s.err }
func (s failingStore) Drain(context.Context, fencestore.Flight) (bool, error) { return false, s.err }
func (s failingStore) Release(fencestore.Flight)                              {}
func (s failingStore) Close() error                                           { return nil }

// A 503 says why in words a client can act on: a store refused as unsafe
// names the setting; a timeout names the bound; any other failure names
// neither a bound it did not hit nor the store's own error text.
func TestUnavailableDetail(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		want, not string
	}{
		{"unsafe", &fencestore.UnsafeError{Reason: "Redis maxmemory-policy is allkeys-lru"},
			"refused as unsafe: Redis maxmemory-policy is allkeys-lru; nothing was forwarded", "within"},
		{"timeout", fencestore.Unavailable(fmt.Errorf("admit: %w", context.DeadlineExceeded)),
			"did not answer within 500ms; nothing was forwarded", "failed"},
		{"refused connection", fencestore.Unavailable(errors.New("dial tcp 10.1.2.3:6379: connect: connection refused")),
			"failed to answer", "within"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "", failingStore{err: tc.err})
			resp, body := f.do("PUT", "/x", "Fencing-Token", "1")
			p := decodeProblem(t, resp, body)
			if resp.StatusCode != 503 || p.Type != TypeStoreUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("%d %+v", resp.StatusCode, p)
			}
			if !strings.Contains(p.Detail, tc.want) || strings.Contains(p.Detail, tc.not) || strings.Contains(p.Detail, "10.1.2.3") {
				t.Fatalf("detail %q: want %q, not %q, and no address", p.Detail, tc.want, tc.not)
			}
			if len(f.up.received()) != 0 {
				t.Fatal("forwarded")
			}
		})
	}
}

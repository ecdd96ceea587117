package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

// received is what the recording upstream saw of one request.
type received struct {
	Method, Path, RawPath, Query, Host string
	Tokens, Sequences                  []string // every line of Fencing-Token, Fencing-Sequence
	Body                               string
}

// recordingUpstream is a real HTTP server that records every request it
// receives.
type recordingUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []received
	custom http.HandlerFunc // if set, answers instead of recording
}

// handle makes the upstream answer with h from now on.
func (u *recordingUpstream) handle(h http.HandlerFunc) {
	u.mu.Lock()
	u.custom = h
	u.mu.Unlock()
}

func newUpstream(t *testing.T) *recordingUpstream {
	t.Helper()
	u := &recordingUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		custom := u.custom
		u.mu.Unlock()
		if custom != nil {
			custom(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, received{
			Method: r.Method, Path: r.URL.Path, RawPath: r.URL.RawPath, Query: r.URL.RawQuery, Host: r.Host,
			Tokens: r.Header.Values("Fencing-Token"), Sequences: r.Header.Values("Fencing-Sequence"), Body: string(body),
		})
		u.mu.Unlock()
		w.Header().Set("X-Upstream", "yes")
		_, _ = io.WriteString(w, "upstream ok")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *recordingUpstream) received() []received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]received(nil), u.reqs...)
}

// fixture is a proxy in front of a recording upstream, both real servers.
type fixture struct {
	t        *testing.T
	up       *recordingUpstream
	front    *httptest.Server
	proxy    *Proxy
	store    fencestore.Store
	metrics  *Metrics
	upstream *url.URL
}

const ordersRoutes = `
routes:
  - name: order-writes
    methods: [PUT, PATCH, DELETE, POST]
    path: /orders/{orderID}
    resource: orders/{orderID}
  - name: jobs
    path: /jobs/{id}
    resource: jobs/{id}
    compare: ">"
  - name: tenant
    path: /tenants/items
    resource: "t/{header:X-Tenant}/{query:item}"
  - name: optional
    path: /opt/{id}
    resource: opt/{id}
    token: optional
  - name: reports
    path: /reports/*
    fence: false
`

func newFixture(t *testing.T, routesYAML string, store fencestore.Store) *fixture {
	t.Helper()
	return newFixtureWith(t, routesYAML, store, nil)
}

// newFixtureWith is newFixture with Options that opts may change.
func newFixtureWith(t *testing.T, routesYAML string, store fencestore.Store, opts func(*Options)) *fixture {
	t.Helper()
	routes := config.DefaultRoutes()
	if routesYAML != "" {
		var err error
		if routes, err = config.ParseRoutes([]byte(routesYAML)); err != nil {
			t.Fatalf("routes: %v", err)
		}
	}
	if store == nil {
		store = memstore.New()
	}
	f := &fixture{t: t, up: newUpstream(t), store: store, metrics: NewMetrics()}
	u, _ := url.Parse(f.up.URL)
	f.upstream = u
	o := Options{Upstream: u, Routes: routes, Store: store, Metrics: f.metrics}
	if opts != nil {
		opts(&o)
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	f.proxy, f.front = p, httptest.NewServer(p)
	t.Cleanup(f.front.Close)
	return f
}

// do sends method target with the given header lines (name, value pairs;
// a name may repeat) and returns the response with its body read.
func (f *fixture) do(method, target string, headers ...string) (*http.Response, string) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.front.URL+target, strings.NewReader("payload"))
	if err != nil {
		f.t.Fatal(err)
	}
	// Send the path exactly as spelled: the client must not normalise the
	// spelling under test.
	// (An opaque "//host/path" is sent in absolute form, which also keeps a
	// path that starts with "//" from being read as an authority.)
	authority := req.URL.Host
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i] == "Host" { // the authority of the absolute-form target is the Host
			authority = headers[i+1]
			continue
		}
		req.Header.Add(headers[i], headers[i+1])
	}
	path, query, _ := strings.Cut(target, "?")
	req.URL.Opaque, req.URL.RawQuery = "//"+authority+path, query
	resp, err := f.front.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

type problemBody struct {
	Type, Title, Detail, Route, Resource, Token, HighWaterMark string
	Status                                                     int
}

func decodeProblem(t *testing.T, resp *http.Response, body string) problemBody {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json (body %s)", ct, body)
	}
	var p problemBody
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	if p.Status != resp.StatusCode {
		t.Fatalf("problem status %d != response status %d", p.Status, resp.StatusCode)
	}
	if p.Title == "" || p.Detail == "" {
		t.Fatalf("problem lacks title or detail: %+v", p)
	}
	return p
}

package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

func mustRoutes(t testing.TB, y string) config.Routes {
	t.Helper()
	rs, err := config.ParseRoutes([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// Routes follow chi's rules: static beats parameter beats wildcard, and a
// route matches only its methods; everything else gets the default rule.
func TestRouteMatching(t *testing.T) {
	rs := mustRoutes(t, `
routes:
  - name: static
    path: /orders/special
    resource: special
  - name: param
    path: /orders/{id}
    resource: orders/{id}
  - name: regex
    path: /users/{uid:[0-9]+}
    resource: users/{uid}
  - name: wild
    path: /files/*
    resource: files/{*}
  - name: deletes
    methods: [DELETE]
    path: /carts/{id}
    resource: carts/{id}
`)
	rt, err := newRouter(rs, "Fencing-Token", "Fencing-Sequence", NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, path, route string
		fences              bool
	}{
		{"PUT", "/orders/special", "static", true},
		{"PUT", "/orders/7", "param", true},
		{"GET", "/orders/7", "default", false}, // method not routed: the default rule, which does not fence GET
		{"PUT", "/users/12", "regex", true},
		{"PUT", "/users/ab", "default", true},
		{"PUT", "/files/a/b/c", "wild", true},
		{"DELETE", "/carts/1", "deletes", true},
		{"PUT", "/carts/1", "default", true},
		{"BREW", "/orders/7", "default", false}, // unknown method
		{"PUT", "/", "default", true},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r, rctx := rt.match(tc.method, tc.path)
			defer rt.release(rctx)
			if r.name != tc.route || r.fences(tc.method) != tc.fences {
				t.Fatalf("matched %q (fences %v), want %q (fences %v)", r.name, r.fences(tc.method), tc.route, tc.fences)
			}
		})
	}
}

// Matching a route and reading its parameters allocates nothing per request.
// Allocation counts are deterministic, so this is not a timing assertion.
func TestRouteMatchDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items on purpose under -race; run without -race (make test runs both)")
	}
	rt, err := newRouter(mustRoutes(t, ordersRoutes), "Fencing-Token", "Fencing-Sequence", NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	rt.release(func() *chi.Context { _, c := rt.match("PUT", "/orders/1"); return c }()) // warm the pool
	allocs := testing.AllocsPerRun(1000, func() {
		r, rctx := rt.match("PUT", "/orders/42")
		if v, _ := urlParam(rctx, "orderID"); v != "42" || r.name != "order-writes" {
			t.Fatal("wrong match")
		}
		rt.release(rctx)
	})
	if allocs != 0 {
		t.Fatalf("route match allocates %.1f times per request", allocs)
	}
}

func TestChiRefusalNamesTheRoute(t *testing.T) {
	rs := config.Routes{Routes: []config.Route{{Name: "broken", Path: "/a/{x}/*/b", Pattern: "/a/{x}/*/b", Methods: []string{http.MethodPut}}}}
	if err := CheckRoutes(rs); err == nil {
		t.Fatal("chi accepted a wildcard in the middle")
	} else if got := err.Error(); !strings.Contains(got, `route "broken"`) {
		t.Fatalf("error %q does not name the route", got)
	}
}

// The fence adds no allocation to a request: ServeHTTP for an admitted
// request (canonical path, route, token, resource name, admission against the
// memory store, counters, then the forward) allocates exactly what the
// forward alone allocates for the same request. The forward is
// httputil.ReverseProxy with a canned transport; its own allocations are
// net/http's and not counted against the fence. The admission deadline is
// shared per millisecond (sharedDeadline), so it shows up here as a fraction
// of an allocation, rounded away: it is one per millisecond, not per request.
func TestFenceAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items on purpose under -race; run without -race (make test runs both)")
	}
	tests := []struct {
		name, routes, path, route string
		sequence                  bool // send a Fencing-Sequence
	}{
		{"path parameter", ordersRoutes, "/orders/42", "order-writes", false},
		{"Host header", "routes:\n  - name: by-host\n    path: /h/{id}\n    resource: \"h/{header:Host}/{id}\"\n", "/h/7", "by-host", false},
		// One token, a growing sequence: each request is admitted by the pair.
		{"sequence required", "routes:\n  - name: seq\n    path: /s/{id}\n    resource: s/{id}\n    sequence: required\n", "/s/7", "seq", true},
		{"sequence optional", "routes:\n  - name: seq\n    path: /s/{id}\n    resource: s/{id}\n    sequence: optional\n", "/s/7", "seq", true},
	}
	for _, tc := range tests {
		for _, drain := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/drain=%v", tc.name, drain), func(t *testing.T) {
				fenceAllocs(t, tc.routes, tc.path, tc.route, tc.sequence, drain)
			})
		}
	}
}

// What an admitted request allocates beyond its forward: the upstream
// deadline (FENCE_UPSTREAM_TIMEOUT: the context that carries it, its timer,
// and the request copy that takes it to the transport), and with the drain
// barrier the memory store's in-flight entry, its own wake-up channel (a
// release wakes only the waiters it concerns) and the exchange that keeps
// the upstream response read when the client leaves (proxy/exchange.go).
// The admission itself (route, token, resource name, mark cache, store)
// adds none.
const (
	deadlineAllocs = 6
	barrierAllocs  = 6
)

// fenceAllocs compares a whole fenced request with its forward alone.
func fenceAllocs(t *testing.T, routes, path, route string, sequence, drain bool) {
	tc := struct {
		routes, path, route string
		sequence            bool
	}{routes, path, route, sequence}
	{
		{
			up, _ := url.Parse("http://127.0.0.1:1")
			p, err := New(Options{Upstream: up, Routes: mustRoutes(t, tc.routes), Store: memstore.New(), Transport: cannedTransport{},
				NoDrain: !drain, MarkCache: 1000})
			if err != nil {
				t.Fatal(err)
			}
			rt, rctx := p.table.Load().match("PUT", tc.path)
			p.table.Load().release(rctx)
			if rt.name != tc.route {
				t.Fatalf("route %q", rt.name)
			}
			token := uint64(1 << 40)
			var tokenBuf [20]byte
			request := func() (*http.Request, *httptest.ResponseRecorder) {
				token++
				r := httptest.NewRequest("PUT", tc.path, nil)
				if tc.sequence { // the token stays, the sequence grows
					r.Header["Fencing-Token"] = []string{"7"}
					r.Header["Fencing-Sequence"] = []string{string(strconv.AppendUint(tokenBuf[:0], token, 10))}
				} else {
					r.Header["Fencing-Token"] = []string{string(strconv.AppendUint(tokenBuf[:0], token, 10))}
				}
				return r, httptest.NewRecorder()
			}
			whole := func() {
				r, w := request()
				p.ServeHTTP(w, r)
				if w.Code != 200 {
					t.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			forwardOnly := func() {
				r, w := request()
				rt.forward.ServeHTTP(w, r)
				if w.Code != 200 {
					t.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
			whole() // the first request for a resource interns its name
			forwardOnly()
			base := testing.AllocsPerRun(1000, forwardOnly)
			fenced := testing.AllocsPerRun(1000, whole)
			want := float64(deadlineAllocs)
			if drain {
				want += barrierAllocs
			}
			if fenced > base+want {
				t.Fatalf("a fenced request (drain %v) allocates %.0f times, the forward alone %.0f: the fence adds %.0f, above %.0f",
					drain, fenced, base, fenced-base, want)
			}
			if base == 0 {
				t.Fatal("the forward allocated nothing: the comparison measures nothing")
			}
		}
	}
}

// admittedAllocs bounds what one admitted request costs fenceproxy's
// process in allocations, as serve ships it (the drain barrier on, the
// mark cache, metrics, a request id made here, tracing off) with the
// memory store and a canned upstream: everything ServeHTTP allocates,
// forwarding included, beyond building the request and its recorder.
// Forwarded through httputil.ReverseProxy rather than the direct path
// (direct.go), the same request allocated 31.
const admittedAllocs = 21

// The whole admitted request stays within admittedAllocs: the allocation
// budget that guards the CPU figures of docs/performance.md (about half of
// a request's instructions are the collector's, which follow allocations).
func TestAdmittedRequestAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items on purpose under -race; run without -race (make test runs both)")
	}
	up, _ := url.Parse("http://127.0.0.1:1")
	p, err := New(Options{Upstream: up, Routes: mustRoutes(t, ordersRoutes), Store: memstore.New(), Transport: cannedTransport{},
		MarkCache: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	// Requests in flight share their upstream deadline per millisecond
	// (flightDeadlines): under load every request but the first of its
	// millisecond takes one made already. One grain for the whole test
	// counts that case whatever the machine's speed, not the share of
	// requests that happen to open a millisecond.
	p.flights.grain = time.Hour
	token := 1 << 40
	var buf [20]byte
	serve := func(h http.Handler, want int) func() {
		return func() {
			token++
			// 1000 resources, each name of three digits: strconv.Itoa
			// allocates none for 0-99, so names below 100 would make the
			// harness's count fractional (15.9), and AllocsPerRun's
			// truncation would then tip the difference by one either way.
			r := httptest.NewRequest("PUT", "/orders/"+strconv.Itoa(100+token%1000), nil)
			r.Header["Fencing-Token"] = []string{string(strconv.AppendInt(buf[:0], int64(token), 10))}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != want {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	}
	for range 1000 { // every resource seen once: its name interned, its mark remembered
		serve(p, 200)()
	}
	// No collection while counting: one empties the sync.Pools the
	// request draws on (copy buffers, request state), and their refills
	// would count against the request now and then (a run of 38 in CI).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	harness := testing.AllocsPerRun(1000, serve(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), 200))
	whole := testing.AllocsPerRun(1000, serve(p, 200))
	if whole-harness > admittedAllocs {
		t.Fatalf("an admitted request allocates %.0f times beyond its harness, above %d", whole-harness, admittedAllocs)
	}
	t.Logf("an admitted request allocates %.0f times beyond its harness (%.0f)", whole-harness, harness)
}

package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
	rt, err := newRouter(rs, "Fencing-Token", NewMetrics())
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
	rt, err := newRouter(mustRoutes(t, ordersRoutes), "Fencing-Token", NewMetrics())
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
	rs := config.Routes{Routes: []config.Route{{Name: "broken", Path: "/a/{x}/*/b", Methods: []string{http.MethodPut}}}}
	if err := CheckRoutes(rs); err == nil {
		t.Fatal("chi accepted a wildcard in the middle")
	} else if got := err.Error(); !strings.Contains(got, `route "broken"`) {
		t.Fatalf("error %q does not name the route", got)
	}
}

// The fence's steps, in the handler's order (canonical path, route, token,
// resource name, admission against the memory store), allocate nothing per
// request once a resource has been seen. The handler adds one allocation of
// its own, the admission's deadline context; forwarding (net/http) is not
// counted here.
func TestHotPathDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items on purpose under -race; run without -race (make test runs both)")
	}
	rt, err := newRouter(mustRoutes(t, ordersRoutes), "Fencing-Token", NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	r := httptest.NewRequest("PUT", "/orders/42", nil)
	r.Header.Set("Fencing-Token", "18446744073709551000")
	ctx := context.Background()
	step := func() {
		canon, _, err := CanonicalPath(r.URL.EscapedPath())
		if err != nil {
			t.Fatal(err)
		}
		route, rctx := rt.match(r.Method, canon)
		token, err := ParseToken(r.Header["Fencing-Token"])
		if err != nil {
			t.Fatal(err)
		}
		var buf [128]byte
		name, err := fillResource(buf[:0], &route.resource, r, rctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		d, err := store.Admit(ctx, route.names.intern(name), token, route.compare)
		if err != nil || !d.Admitted {
			t.Fatal(d, err)
		}
		route.metrics.requests[decAdmitted].Inc()
		rt.release(rctx)
	}
	step() // the first request for a resource interns its name
	if allocs := testing.AllocsPerRun(1000, step); allocs != 0 {
		t.Fatalf("the fence's steps allocate %.1f times per request", allocs)
	}
}

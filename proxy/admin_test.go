package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

func TestAdminHealthAndReadiness(t *testing.T) {
	store := memstore.New()
	var failing error
	a := NewAdmin(AdminOptions{Store: store, Metrics: NewMetrics(), Checks: []ReadinessCheck{
		func(context.Context) error { return failing },
	}})

	if code, _ := get(t, a, "/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, body := get(t, a, "/readyz"); code != 200 {
		t.Fatalf("readyz %d %s", code, body)
	}
	failing = errors.New("redis maxmemory-policy is allkeys-lru")
	if code, body := get(t, a, "/readyz"); code != 503 || !strings.Contains(body, "allkeys-lru") {
		t.Fatalf("readyz with a failing check: %d %s", code, body)
	}
	failing = nil
	_ = store.Close()
	if code, _ := get(t, a, "/readyz"); code != 503 {
		t.Fatalf("readyz with a closed store: %d", code)
	}
	if code, _ := get(t, a, "/healthz"); code != 200 {
		t.Fatalf("healthz must not depend on the store: %d", code)
	}

	b := NewAdmin(AdminOptions{Store: memstore.New()})
	b.SetDraining()
	if code, _ := get(t, b, "/readyz"); code != 503 {
		t.Fatalf("readyz while draining: %d", code)
	}
}

// /metrics counts every decision by route, and shows the admission histogram.
func TestMetricsCountDecisions(t *testing.T) {
	f := newFixture(t, ordersRoutes, nil)
	f.do("PUT", "/orders/1", "Fencing-Token", "5") // admitted
	f.do("PUT", "/orders/1", "Fencing-Token", "4") // stale
	f.do("PUT", "/orders/1")                       // missing
	f.do("PUT", "/orders/1", "Fencing-Token", "x") // malformed
	f.do("GET", "/orders/1")                       // unfenced (default rule)
	f.do("PUT", "/orders;1", "Fencing-Token", "5") // bad_request (default rule)
	a := NewAdmin(AdminOptions{Store: f.store, Metrics: f.metrics})
	code, body := get(t, a, "/metrics")
	if code != 200 {
		t.Fatalf("metrics %d", code)
	}
	for _, want := range []string{
		`fenceproxy_requests_total{decision="admitted",route="order-writes"} 1`,
		`fenceproxy_requests_total{decision="stale",route="order-writes"} 1`,
		`fenceproxy_requests_total{decision="missing",route="order-writes"} 1`,
		`fenceproxy_requests_total{decision="malformed",route="order-writes"} 1`,
		`fenceproxy_requests_total{decision="unfenced",route="default"} 1`,
		`fenceproxy_requests_total{decision="bad_request",route="default"} 1`,
		`fenceproxy_requests_total{decision="unavailable",route="jobs"} 0`,
		`fenceproxy_admission_duration_seconds_count{decision="admitted",route="order-writes"} 1`,
		`fenceproxy_admission_duration_seconds_count{decision="stale",route="order-writes"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

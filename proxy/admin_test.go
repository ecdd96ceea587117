package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// /healthz never depends on the store. /readyz does not either by default:
// a store that does not answer or that a check refuses (unsafe, lost) is
// shown in fenceproxy_store_up and fenceproxy_store_state, and the replica
// stays ready; with ReadyRequiresStore (FENCE_READY_REQUIRES_STORE=true)
// /readyz fails with the reason. Draining fails /readyz either way.
func TestAdminHealthAndReadiness(t *testing.T) {
	lost := &fencestore.LostError{Want: "id-1", Found: "id-2"}
	for _, requires := range []bool{false, true} {
		t.Run(fmt.Sprintf("ReadyRequiresStore=%v", requires), func(t *testing.T) {
			store := memstore.New()
			var failing error
			m := NewMetrics()
			a := NewAdmin(AdminOptions{Store: store, Metrics: m, ReadyRequiresStore: requires, Checks: []ReadinessCheck{
				func(context.Context) error { return failing },
			}})
			tests := []struct {
				name    string
				prepare func()
				state   StoreState
				up      string
				reason  string // in /readyz's body when it fails
			}{
				{"healthy", func() {}, StoreOK, "1", ""},
				{"failing check", func() { failing = errors.New("redis maxmemory-policy is allkeys-lru") }, StoreUnsafe, "1", "allkeys-lru"},
				{"lost", func() { failing = lost }, StoreLost, "1", "id-2"},
				{"closed store", func() { failing = nil; _ = store.Close() }, StoreDown, "0", "fence store: "},
			}
			for _, tt := range tests {
				tt.prepare()
				a.health.look(t.Context()) // what WatchStore does every few seconds
				code, body := get(t, a, "/readyz")
				switch {
				case tt.state == StoreOK || !requires:
					if code != 200 {
						t.Errorf("%s: readyz %d %s, want 200", tt.name, code, body)
					}
					if tt.state != StoreOK && !strings.Contains(body, "fence store is "+string(tt.state)) {
						t.Errorf("%s: readyz body %q does not say the store is %s", tt.name, body, tt.state)
					}
				case code != 503 || !strings.Contains(body, tt.reason):
					t.Errorf("%s: readyz %d %q, want 503 naming %q", tt.name, code, body, tt.reason)
				}
				_, metrics := get(t, a, "/metrics")
				for _, s := range storeStates {
					want := "0"
					if s == tt.state {
						want = "1"
					}
					if line := `fenceproxy_store_state{state="` + string(s) + `"} ` + want; !strings.Contains(metrics, line) {
						t.Errorf("%s: metrics lack %s", tt.name, line)
					}
				}
				if line := "fenceproxy_store_up " + tt.up; !strings.Contains(metrics, line) {
					t.Errorf("%s: metrics lack %s", tt.name, line)
				}
				if code, _ := get(t, a, "/healthz"); code != 200 {
					t.Errorf("%s: healthz %d", tt.name, code)
				}
			}

			b := NewAdmin(AdminOptions{Store: memstore.New(), ReadyRequiresStore: requires})
			b.SetDraining()
			if code, _ := get(t, b, "/readyz"); code != 503 {
				t.Fatalf("readyz while draining: %d", code)
			}
		})
	}
}

// WatchStore looks at the store at once and then every StoreEvery, so the
// metrics follow a store that fails while nobody asks.
func TestAdminWatchStore(t *testing.T) {
	store := memstore.New()
	m := NewMetrics()
	a := NewAdmin(AdminOptions{Store: store, Metrics: m, StoreEvery: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.WatchStore(ctx); close(done) }()
	waitMetric := func(line string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, metrics := get(t, a, "/metrics"); strings.Contains(metrics, line) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("metrics never showed %s", line)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitMetric(`fenceproxy_store_state{state="ok"} 1`)
	_ = store.Close()
	waitMetric(`fenceproxy_store_state{state="down"} 1`)
	waitMetric("fenceproxy_store_up 0")
	cancel()
	<-done
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

package proxy

import (
	"net/http"
	"sync"
	"testing"
)

// Fencing and optimistic concurrency answer different questions and do not
// interfere: If-Match and If-None-Match reach the upstream untouched, and
// its ETag and 412 come back untouched. The fence orders authority (is this
// writer's lease the newest?); the precondition detects that the record
// changed since it was read.
func TestPreconditionsPassThrough(t *testing.T) {
	f := newFixture(t, ordersRoutes, nil)
	var mu sync.Mutex
	var seen []http.Header
	got := func() []http.Header { mu.Lock(); defer mu.Unlock(); return seen }
	f.up.handle(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("ETag", `"v2"`)
		if r.Header.Get("If-Match") == `"stale"` {
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	resp, _ := f.do("PUT", "/orders/1", "Fencing-Token", "5", "If-Match", `"v1"`, "If-None-Match", `"v0"`)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") != `"v2"` {
		t.Fatalf("admitted write: %d, ETag %q", resp.StatusCode, resp.Header.Get("ETag"))
	}
	if h := got(); len(h) != 1 || h[0].Get("If-Match") != `"v1"` || h[0].Get("If-None-Match") != `"v0"` {
		t.Fatalf("the upstream saw %v", h)
	}
	// The upstream's 412 is its answer, relayed as is: the fence admitted
	// the token, the record had changed.
	resp, _ = f.do("PUT", "/orders/1", "Fencing-Token", "5", "If-Match", `"stale"`)
	if resp.StatusCode != http.StatusPreconditionFailed || resp.Header.Get("ETag") != `"v2"` {
		t.Errorf("precondition failed upstream: %d, ETag %q", resp.StatusCode, resp.Header.Get("ETag"))
	}
	// A stale token is refused before the precondition is ever checked.
	resp, _ = f.do("PUT", "/orders/1", "Fencing-Token", "4", "If-Match", `"v2"`)
	if resp.StatusCode != http.StatusConflict || len(got()) != 2 {
		t.Errorf("stale token with a matching ETag: %d, upstream saw %d requests", resp.StatusCode, len(got()))
	}
}

package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// describe's percentiles are vegeta's estimates (t-digest): close to the
// exact ones, with max exact.
func TestDescribePercentiles(t *testing.T) {
	var s []sample
	for i := range 1000 {
		s = append(s, sample{res: &vegeta.Result{Code: 200, Latency: time.Duration(i+1) * time.Millisecond}, lag: time.Duration(i+1) * time.Microsecond})
	}
	st := describe(s)
	near := func(what string, got, want time.Duration) {
		t.Helper()
		if d := got - want; d < -2*time.Millisecond || d > 2*time.Millisecond {
			t.Errorf("%s = %v, want about %v", what, got, want)
		}
	}
	near("p50", st.p50, 500*time.Millisecond)
	near("p90", st.p90, 900*time.Millisecond)
	near("p99", st.p99, 990*time.Millisecond)
	near("p99.9", st.p999, 999*time.Millisecond)
	if st.max != time.Second || st.n != 1000 {
		t.Errorf("max = %v, n = %d", st.max, st.n)
	}
	if d := st.lagP99 - 990*time.Microsecond; d < -5*time.Microsecond || d > 5*time.Microsecond {
		t.Errorf("send-lag p99 = %v, want about 990µs", st.lagP99)
	}
	if st := describe(nil); st.n != 0 || st.p99 != 0 {
		t.Errorf("describe(nil) = %+v", st)
	}
}

// A request that fails still counts, with the time it waited, so a target
// that times out cannot look fast; a refusal is a non-2xx answer, not an
// error (vegeta's own Errors would count both).
func TestDescribeCountsFailures(t *testing.T) {
	s := describe([]sample{
		{res: &vegeta.Result{Latency: time.Millisecond, Code: 200}},
		{res: &vegeta.Result{Latency: 2 * time.Millisecond, Code: 409, Error: "409 Conflict"}},
		{res: &vegeta.Result{Latency: 5 * time.Second, Error: "context deadline exceeded"}},
	})
	if s.n != 3 || s.non2xx != 1 || s.errors != 1 || s.max != 5*time.Second || s.statuses["409"] != 1 || s.statuses["0"] != 1 {
		t.Fatalf("describe = %+v", s)
	}
}

// TestRunOpenLoop drives two local targets at once and checks what the
// benchmark relies on: exactly rate x duration requests per target, their
// PUTs with rising tokens, latency counted from the scheduled send time, and
// an open loop: while one request is held, the others go on being sent.
// (Timing-free: the held request waits for the others to arrive.)
func TestRunOpenLoop(t *testing.T) {
	var (
		mu      sync.Mutex
		tokens  []uint64
		arrived atomic.Int64
		heldFor time.Duration // how long the 20th request was held
		freed   bool          // by 10 more arriving (else: by the time limit)
	)
	handler := func(w http.ResponseWriter, r *http.Request) {
		n := arrived.Add(1)
		body, _ := io.ReadAll(r.Body)
		tok, err := strconv.ParseUint(r.Header.Get("Fencing-Token"), 10, 64)
		if r.Method != http.MethodPut || !strings.HasPrefix(r.URL.Path, "/r/o") || string(body) != string(payload) || err != nil ||
			r.Header.Get("Content-Type") != "application/octet-stream" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		tokens = append(tokens, tok)
		mu.Unlock()
		if n == 20 { // held until 10 more requests have arrived: an open loop sends them meanwhile
			t0 := time.Now()
			for arrived.Load() < 30 && time.Since(t0) < 3*time.Second {
				time.Sleep(time.Millisecond)
			}
			heldFor, freed = time.Since(t0), arrived.Load() >= 30
		}
		w.Write(payload)
	}
	a, b := httptest.NewServer(http.HandlerFunc(handler)), httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusConflict)
	}))
	defer a.Close()
	defer b.Close()

	g := &generator{client: &http.Client{Timeout: 5 * time.Second}, header: "Fencing-Token", keys: 10, keyPrefix: "o"}
	g.token.Store(1000)
	res := g.run([]target{{"a", a.URL}, {"b", b.URL}}, 500, 400*time.Millisecond)
	if len(res) != 2 || len(res[0]) != 200 || len(res[1]) != 200 {
		t.Fatalf("samples per target: %d, %d; want 200 each", len(res[0]), len(res[1]))
	}
	sa, sb := describe(res[0]), describe(res[1])
	if sa.non2xx != 0 || sa.errors != 0 || sb.non2xx != 200 || sb.statuses["409"] != 200 {
		t.Errorf("target a: %+v; target b: %+v", sa, sb)
	}
	if !freed {
		t.Errorf("no 10 requests were sent while one was held for %v: not an open loop", heldFor)
	}
	if sa.max < heldFor {
		t.Errorf("the held request's latency is missing: max %v < %v held", sa.max, heldFor)
	}
	seen := map[uint64]bool{}
	for _, tok := range tokens {
		if tok <= 1000 || seen[tok] {
			t.Fatalf("token %d repeated or not above the start", tok)
		}
		seen[tok] = true
	}
	for _, s := range append(res[0], res[1]...) {
		if s.lag < 0 || s.res.Latency < s.lag {
			t.Fatalf("lag %v, latency from schedule %v", s.lag, s.res.Latency)
		}
	}
}

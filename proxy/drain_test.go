package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

const drainRoutes = `
routes:
  - name: docs
    path: /docs/{id}
    resource: docs/{id}
  - name: loose
    path: /loose/{id}
    resource: loose/{id}
    drain: false
`

// heldUpstream answers every request at once, except one with an X-Hold
// header, which it holds until release is closed. arrivals receives the
// token of every request as it begins.
type heldUpstream struct {
	arrivals chan string
	release  chan struct{}
}

func holdingUpstream(f *fixture) *heldUpstream {
	h := &heldUpstream{arrivals: make(chan string, 64), release: make(chan struct{})}
	f.up.handle(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h.arrivals <- r.Header.Get("Fencing-Token")
		if r.Header.Get("X-Hold") != "" {
			select {
			case <-h.release:
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "stored "+r.Header.Get("Fencing-Token"))
	})
	f.t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	})
	return h
}

// arrives waits for the next arrival and checks its token.
func (h *heldUpstream) arrives(t *testing.T, want string, within time.Duration) time.Time {
	t.Helper()
	select {
	case got := <-h.arrivals:
		if got != want {
			t.Fatalf("upstream saw token %s, want %s", got, want)
		}
		return time.Now()
	case <-time.After(within):
		t.Fatalf("token %s did not reach the upstream within %v", want, within)
	}
	return time.Time{}
}

// nothingArrives fails if any request reaches the upstream within d.
func (h *heldUpstream) nothingArrives(t *testing.T, d time.Duration, why string) {
	t.Helper()
	select {
	case got := <-h.arrivals:
		t.Fatalf("%s: token %s reached the upstream", why, got)
	case <-time.After(d):
	}
}

type sent struct {
	status int
	body   string
	header http.Header
	err    error
}

// send sends a PUT in the background (t.Fatal cannot be called off the test
// goroutine) and returns where its answer will arrive.
func (f *fixture) send(path, token string, hold bool) <-chan sent {
	out := make(chan sent, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPut, f.front.URL+path, strings.NewReader("v"))
		req.Header.Set("Fencing-Token", token)
		if hold {
			req.Header.Set("X-Hold", "1")
		}
		resp, err := f.front.Client().Do(req)
		if err != nil {
			out <- sent{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- sent{status: resp.StatusCode, body: string(b), header: resp.Header}
	}()
	return out
}

func answer(t *testing.T, ch <-chan sent, wantStatus int) sent {
	t.Helper()
	select {
	case s := <-ch:
		if s.err != nil {
			t.Fatal(s.err)
		}
		if s.status != wantStatus {
			t.Fatalf("status %d, want %d (body %s)", s.status, wantStatus, s.body)
		}
		return s
	case <-time.After(10 * time.Second):
		t.Fatalf("no answer within 10s (want %d)", wantStatus)
	}
	return sent{}
}

func drainCount(f *fixture, route string, o drainOutcome) float64 {
	return testutil.ToFloat64(f.metrics.drain.WithLabelValues(route, drainOutcomeNames[o]))
}

// The barrier's promise in one story: 42 is not sent while 41 is held in
// the upstream, is sent right after 41 completes, and another request with
// 41 never waits.
func TestDrainBarrierHoldsNewerToken(t *testing.T) {
	f := newFixture(t, drainRoutes, memstore.New())
	h := holdingUpstream(f)

	held := f.send("/docs/1", "41", true)
	h.arrives(t, "41", 5*time.Second)

	answer(t, f.send("/docs/1", "41", false), http.StatusOK)
	h.arrives(t, "41", time.Second) // an equal token went through while 41 is held

	newer := f.send("/docs/1", "42", false)
	h.nothingArrives(t, 300*time.Millisecond, "42 while 41 is in flight")

	releasedAt := time.Now()
	close(h.release)
	answer(t, held, http.StatusOK)
	arrived := h.arrives(t, "42", 5*time.Second)
	t.Logf("42 reached the upstream %v after 41 was released", arrived.Sub(releasedAt))
	if got := answer(t, newer, http.StatusOK).body; got != "stored 42" {
		t.Fatalf("42's answer: %q", got)
	}
	if got := drainCount(f, "docs", drainWaited); got != 1 {
		t.Fatalf("drain_total{outcome=waited} = %v, want 1", got)
	}
	if got := drainCount(f, "docs", drainNone); got != 2 {
		t.Fatalf("drain_total{outcome=none} = %v, want 2", got)
	}
	if n := testutil.CollectAndCount(f.metrics.drainWait); n != 3 { // docs, loose and the default rule, visible from the start
		t.Fatalf("drain_wait_seconds has %d series, want 3", n)
	}
}

// drain: false on a route, and FENCE_DRAIN=off for all, send a newer token
// at once.
func TestDrainOptOut(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		noDrain    bool
	}{
		{"drain: false", "/loose/1", false},
		{"FENCE_DRAIN=off", "/docs/1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixtureWith(t, drainRoutes, memstore.New(), func(o *Options) { o.NoDrain = tc.noDrain })
			h := holdingUpstream(f)
			held := f.send(tc.path, "41", true)
			h.arrives(t, "41", 5*time.Second)
			answer(t, f.send(tc.path, "42", false), http.StatusOK)
			h.arrives(t, "42", time.Second)
			close(h.release)
			answer(t, held, http.StatusOK)
		})
	}
}

// FENCE_DRAIN_TIMEOUT: a newer request that waited that long gets 503
// drain-timeout with Retry-After and "forwarded": "false", is never
// forwarded, and its token has advanced the mark all the same.
func TestDrainTimeout(t *testing.T) {
	f := newFixtureWith(t, drainRoutes, memstore.New(), func(o *Options) { o.DrainTimeout = 200 * time.Millisecond })
	h := holdingUpstream(f)
	held := f.send("/docs/1", "41", true)
	h.arrives(t, "41", 5*time.Second)

	s := answer(t, f.send("/docs/1", "42", false), http.StatusServiceUnavailable)
	resp := &http.Response{StatusCode: s.status, Header: s.header}
	p := decodeProblem(t, resp, s.body)
	if p.Type != TypeDrainTimeout || s.header.Get("Retry-After") == "" || p.Token != "42" || p.Resource != "docs/1" ||
		!strings.Contains(s.body, `"forwarded":"false"`) {
		t.Fatalf("drain timeout answer: %+v, Retry-After %q", p, s.header.Get("Retry-After"))
	}
	close(h.release)
	answer(t, held, http.StatusOK)
	h.nothingArrives(t, 200*time.Millisecond, "42 after its drain timeout")
	if got := drainCount(f, "docs", drainTimeout); got != 1 {
		t.Fatalf("drain_total{outcome=timeout} = %v, want 1", got)
	}
	// The mark advanced to 42: the old holder is refused.
	if st := answer(t, f.send("/docs/1", "41", false), http.StatusConflict); !strings.Contains(st.body, TypeStaleToken) {
		t.Fatalf("41 after 42's timeout: %s", st.body)
	}
}

// FENCE_UPSTREAM_TIMEOUT: an upstream that holds a request past it gets it
// abandoned (504), and the newer request it held back goes on then.
func TestUpstreamDeadline(t *testing.T) {
	const timeout = 600 * time.Millisecond
	f := newFixtureWith(t, drainRoutes, memstore.New(), func(o *Options) { o.UpstreamTimeout = timeout })
	h := holdingUpstream(f)
	start := time.Now()
	held := f.send("/docs/1", "41", true)
	h.arrives(t, "41", 5*time.Second)
	// 42's own deadline is then well after 41's, so 42 has time to go on
	// once 41's deadline ended its hold.
	time.Sleep(timeout / 2)
	newer := f.send("/docs/1", "42", false)

	s := answer(t, held, http.StatusGatewayTimeout)
	if !strings.Contains(s.body, "FENCE_UPSTREAM_TIMEOUT") {
		t.Fatalf("504 does not name the bound: %s", s.body)
	}
	if took := time.Since(start); took < timeout {
		t.Fatalf("41 abandoned after %v, before its deadline %v", took, timeout)
	}
	h.arrives(t, "42", 5*time.Second)
	answer(t, newer, http.StatusOK)
	if w, e := drainCount(f, "docs", drainWaited), drainCount(f, "docs", drainExpired); w+e != 1 {
		t.Fatalf("drain_total waited %v + expired %v, want 1", w, e)
	}
}

// frozenCtx has a deadline that has passed by the clock, but whose timer
// has not fired: the state of a process that resumes after a freeze.
type frozenCtx struct {
	context.Context
	d time.Time
}

func (c frozenCtx) Deadline() (time.Time, bool) { return c.d, true }

// A request whose upstream deadline has passed by the clock is not sent,
// even when its context has not noticed yet; a body read after it fails.
func TestPastDeadlineSendsNothing(t *testing.T) {
	var conns atomic.Int32
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	ctx := frozenCtx{Context: context.Background(), d: time.Now().Add(-time.Millisecond)}
	for _, body := range []string{"", "small body"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, up.URL+"/x", strings.NewReader(body))
		if body == "" {
			req.Body, req.ContentLength = http.NoBody, 0
		}
		_, err := NewTransport().RoundTrip(req)
		var ns *upstream.NotSentError
		if !errors.Is(err, errPastDeadline) || !errors.As(err, &ns) {
			t.Fatalf("RoundTrip past the deadline = %v, want a not-sent errPastDeadline", err)
		}
		if p := upstreamProblem(err, "r"); p.Status != http.StatusGatewayTimeout || !strings.Contains(p.Detail, "nothing was forwarded") {
			t.Fatalf("answer: %+v", p)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("the upstream saw %d connections", n)
	}
	b := &sendByBody{ReadCloser: io.NopCloser(strings.NewReader("later write")), ctx: ctx}
	if _, err := b.Read(make([]byte, 8)); !errors.Is(err, errPastDeadline) {
		t.Fatalf("body read past the deadline = %v", err)
	}
}

// FENCE_BODY_TIMEOUT bounds the client's sending only: a large body (read
// as it is forwarded) that waited at the barrier longer than the bound is
// forwarded whole once the older request ends. Before, the wait counted,
// and the body was cut off at the upstream (unexpected EOF, 504).
func TestBodyTimeoutStopsAtTheBarrier(t *testing.T) {
	const bound = 300 * time.Millisecond
	f := newFixtureWith(t, drainRoutes, memstore.New(), func(o *Options) { o.BodyTimeout = bound })
	h := holdingUpstream(f)
	got := make(chan int, 1)
	f.up.handle(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		tok := r.Header.Get("Fencing-Token")
		h.arrivals <- tok
		if r.Header.Get("X-Hold") != "" {
			<-h.release
		}
		if tok == "42" {
			if err != nil {
				n = -1
			}
			got <- int(n)
		}
		_, _ = io.WriteString(w, "stored "+tok)
	})
	held := f.send("/docs/1", "41", true)
	h.arrives(t, "41", 5*time.Second)

	size := 2*maxBodyFirst + 1
	out := make(chan sent, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPut, f.front.URL+"/docs/1", strings.NewReader(strings.Repeat("b", size)))
		req.Header.Set("Fencing-Token", "42")
		resp, err := f.front.Client().Do(req)
		if err != nil {
			out <- sent{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- sent{status: resp.StatusCode, body: string(b)}
	}()
	h.nothingArrives(t, 3*bound, "42 while 41 is in flight")
	close(h.release)
	answer(t, held, http.StatusOK)
	h.arrives(t, "42", 5*time.Second)
	answer(t, out, http.StatusOK)
	if n := <-got; n != size {
		t.Fatalf("the upstream read %d bytes of 42's body, want %d", n, size)
	}
}

// A request whose replica died is never released. A waiter watches it for
// its bound plus fencestore.AbandonMargin from its own admission, longer
// than the waiter's own upstream deadline allows it to wait; so the waiter
// is answered first (504 at its deadline, or 503 at FENCE_DRAIN_TIMEOUT;
// nothing forwarded) but goes on watching, and takes the dead request out of
// the barrier when it counts as abandoned. The next request then goes. Were
// the watch cut with the answer, every waiter would stop short of the
// abandonment, and the resource would admit nothing again.
func TestWaiterWatchesAnAbandonedRequestToItsEnd(t *testing.T) {
	const timeout = 2 * time.Second
	for _, tt := range []struct {
		name         string
		drainTimeout time.Duration
		status       int // 42's answer where the store abandons 41 only after watching it
		// wait43 is how long after 42 is sent 43 is: 43 must still be
		// waiting when 42's watch of 41 ends (timeout + 1 s after 42's
		// admission), its own deadline or FENCE_DRAIN_TIMEOUT still ahead.
		wait43 time.Duration
	}{
		{"answered at its own deadline", 0, http.StatusGatewayTimeout, fencestore.AbandonMargin + 200*time.Millisecond},
		{"answered at FENCE_DRAIN_TIMEOUT", 300 * time.Millisecond, http.StatusServiceUnavailable, timeout + fencestore.AbandonMargin},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := memstore.New()
			f := newFixtureWith(t, drainRoutes, store, func(o *Options) { o.UpstreamTimeout, o.DrainTimeout = timeout, tt.drainTimeout })
			h := holdingUpstream(f)
			// 41, admitted by a replica that died before it released it.
			dead, err := store.Admit(context.Background(), fencestore.Admission{Resource: "docs/1", Token: 41, Flight: timeout})
			if err != nil || !dead.Admitted {
				t.Fatalf("41: %+v, %v", dead, err)
			}

			sent42 := time.Now()
			s := <-f.send("/docs/1", "42", false)
			switch {
			case s.err != nil:
				t.Fatal(s.err)
			case s.status == http.StatusOK:
				// A store that times 41's bound from 41's own admission let
				// 42 through within 42's deadline.
				h.arrives(t, "42", time.Second)
			case s.status == tt.status || s.status == http.StatusGatewayTimeout:
				p := decodeProblem(t, &http.Response{StatusCode: s.status, Header: s.header}, s.body)
				if !strings.Contains(s.body, `"forwarded":"false"`) || p.Route != "docs" {
					t.Fatalf("42 held back: %s", s.body)
				}
				h.nothingArrives(t, 0, "42 after its refusal")
			default:
				t.Fatalf("42: status %d: %s", s.status, s.body)
			}
			time.Sleep(time.Until(sent42.Add(tt.wait43)))
			answer(t, f.send("/docs/1", "43", false), http.StatusOK)
			h.arrives(t, "43", time.Second)
		})
	}
}

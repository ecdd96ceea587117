package client_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// wireProblem is a refusal as fenceproxy writes it (proxy/problem.go): token,
// sequence and marks are decimal strings.
type wireProblem struct {
	Type              string `json:"type"`
	Title             string `json:"title"`
	Status            int    `json:"status"`
	Detail            string `json:"detail"`
	Route             string `json:"route,omitempty"`
	Resource          string `json:"resource,omitempty"`
	Token             string `json:"token,omitempty"`
	HighWaterMark     string `json:"highWaterMark,omitempty"`
	Sequence          string `json:"sequence,omitempty"`
	HighWaterSequence string `json:"highWaterSequence,omitempty"`
	Forwarded         string `json:"forwarded,omitempty"`
}

// writeProblem answers as fenceproxy's writeProblem does: the same headers,
// Retry-After on 503.
func writeProblem(w http.ResponseWriter, p wireProblem) {
	body, _ := json.Marshal(p)
	body = append(body, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.Status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// recorder is an httptest server that records the requests it receives.
type recorder struct {
	srv *httptest.Server

	mu      sync.Mutex
	headers []http.Header // of each request received, in order
	bodies  []string
}

// newRecorder starts a server that records each request, then answers with
// answer (or 200 "ok" when nil). It is closed when the test ends.
func newRecorder(t *testing.T, answer http.HandlerFunc) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.headers = append(rec.headers, r.Header.Clone())
		rec.bodies = append(rec.bodies, string(b))
		rec.mu.Unlock()
		if answer == nil {
			_, _ = io.WriteString(w, "ok")
			return
		}
		answer(w, r)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.headers)
}

// lastHeader returns the header of the last request received.
func (rec *recorder) lastHeader(t *testing.T) http.Header {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.headers) == 0 {
		t.Fatal("the server received no request")
	}
	return rec.headers[len(rec.headers)-1]
}

// closeTracker is a body that records whether it was closed.
type closeTracker struct {
	io.Reader
	mu     sync.Mutex
	closed bool
}

func newCloseTracker(s string) *closeTracker { return &closeTracker{Reader: strings.NewReader(s)} }

func (c *closeTracker) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

func (c *closeTracker) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// roundTripFunc is a Base that answers without a network.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fence is a stand-in for fenceproxy on one resource whose route has
// "sequence: required": it admits a request (t, s) iff there is no mark, or
// t > the mark's token, or t = the mark's token and s > the mark's sequence,
// and answers as the proxy does. It checks headers only as far as these tests
// need; the proxy's own parser is tested in the proxy.
type fence struct {
	mu             sync.Mutex
	marked         bool
	token, seq     uint64
	admitted       []string // "token/sequence" of each admitted request, in order
	refusedStale   int      // stale-token and stale-sequence answers
	refusedMissing int      // sequence-required answers
	// holdBack is how many of the next admitted requests are held back at
	// the barrier, as the proxy does past FENCE_DRAIN_TIMEOUT: the mark
	// moves, nothing is applied, and the answer is drain-timeout.
	holdBack int
}

func (f *fence) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	tv, sv := r.Header.Values("Fencing-Token"), r.Header.Values("Fencing-Sequence")
	if len(tv) != 1 || len(sv) > 1 {
		writeProblem(w, wireProblem{Type: "urn:fenceproxy:token-malformed", Title: "Malformed", Status: 400})
		return
	}
	t, err := strconv.ParseUint(tv[0], 10, 64)
	if err != nil {
		writeProblem(w, wireProblem{Type: "urn:fenceproxy:token-malformed", Title: "Malformed", Status: 400})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(sv) == 0 {
		f.refusedMissing++
		writeProblem(w, wireProblem{Type: "urn:fenceproxy:sequence-required", Title: "Fencing sequence required", Status: 428, Token: tv[0]})
		return
	}
	s, err := strconv.ParseUint(sv[0], 10, 64)
	if err != nil {
		writeProblem(w, wireProblem{Type: "urn:fenceproxy:sequence-malformed", Title: "Malformed fencing sequence", Status: 400, Token: tv[0]})
		return
	}
	if f.marked && (t < f.token || t == f.token && s <= f.seq) {
		f.refusedStale++
		p := wireProblem{
			Type: "urn:fenceproxy:stale-token", Title: "Stale fencing token", Status: 409, Resource: "default",
			Token: tv[0], HighWaterMark: strconv.FormatUint(f.token, 10),
			Sequence: sv[0], HighWaterSequence: strconv.FormatUint(f.seq, 10),
		}
		if t == f.token {
			p.Type, p.Title = "urn:fenceproxy:stale-sequence", "Stale fencing sequence"
		}
		writeProblem(w, p)
		return
	}
	f.marked, f.token, f.seq = true, t, s
	if f.holdBack > 0 {
		f.holdBack--
		writeProblem(w, wireProblem{
			Type: "urn:fenceproxy:drain-timeout", Title: "Older requests still in flight", Status: 503,
			Detail:   "older requests for this resource were still in flight; nothing was forwarded",
			Resource: "default", Token: tv[0], Sequence: sv[0], Forwarded: "false",
		})
		return
	}
	f.admitted = append(f.admitted, tv[0]+"/"+sv[0])
	_, _ = io.WriteString(w, "admitted "+tv[0]+"/"+sv[0])
}

// newFence starts a fence behind an httptest server, closed when the test
// ends.
func newFence(t *testing.T) (*fence, *httptest.Server) {
	t.Helper()
	f := &fence{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

// log returns the admitted requests so far, as "token/sequence".
func (f *fence) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.admitted...)
}

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

// wireProblem is a refusal as fenceproxy writes it (proxy/problem.go): token
// and mark are decimal strings.
type wireProblem struct {
	Type          string `json:"type"`
	Title         string `json:"title"`
	Status        int    `json:"status"`
	Detail        string `json:"detail"`
	Route         string `json:"route,omitempty"`
	Resource      string `json:"resource,omitempty"`
	Token         string `json:"token,omitempty"`
	HighWaterMark string `json:"highWaterMark,omitempty"`
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

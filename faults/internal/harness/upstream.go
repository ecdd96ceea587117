package harness

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

// RequestIDHeader carries each operation's id from the client through the
// proxy to the upstream.
const RequestIDHeader = "X-Request-Id"

// clock is the history's one monotonic clock: nanoseconds since start.
type clock struct{ start time.Time }

func (c clock) now() int64 { return int64(time.Since(c.start)) }

// Upstream is the protected service: an in-process HTTP server that records
// every request it receives (request id, resource, token, time) and answers
// 200.
type Upstream struct {
	clock clock
	srv   *http.Server
	ln    net.Listener

	mu   sync.Mutex
	recs []check.Forward
}

func startUpstream(c clock) (*Upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &Upstream{clock: c, ln: ln}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

// URL returns the base URL the proxies forward to.
func (u *Upstream) URL() string { return "http://" + u.ln.Addr().String() }

// ServeHTTP records the request. The resource is the last path segment of
// /ge/{id} or /gt/{id}; the token is whatever the header says (0 when it
// does not parse, which the checker then finds differs from what was sent).
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := u.clock.now()
	_, _ = io.Copy(io.Discard, r.Body)
	tok, _ := strconv.ParseUint(strings.TrimSpace(r.Header.Get("Fencing-Token")), 10, 64)
	res := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	u.mu.Lock()
	u.recs = append(u.recs, check.Forward{ID: r.Header.Get(RequestIDHeader), Resource: res, Token: tok, At: at})
	u.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok\n")
}

// Forwards returns a copy of what was received so far.
func (u *Upstream) Forwards() []check.Forward {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]check.Forward(nil), u.recs...)
}

func (u *Upstream) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = u.srv.Shutdown(ctx)
}

package harness

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fenceproxy/fenceproxy/faults/check"
)

// RequestIDHeader carries each operation's id from the client through the
// proxy to the upstream.
const RequestIDHeader = "X-Request-Id"

// sentAtHeader carries when the client sent the request, in nanoseconds on
// the history's clock (the upstream shares it).
const sentAtHeader = "X-Faults-Sent-At"

// clock is the history's one monotonic clock: nanoseconds since start.
type clock struct{ start time.Time }

func (c clock) now() int64 { return int64(time.Since(c.start)) }

// Upstream is the protected service: an in-process HTTP server that records
// every request it receives (request id, resource, token, and when it began
// and ended processing it) and answers 200. It can be told to hold some
// requests before answering (a slow upstream).
type Upstream struct {
	clock clock
	srv   *http.Server
	ln    net.Listener

	// hold, when set (before any request arrives), says how long to hold a
	// request after its body was read; 0 for not at all.
	hold func() time.Duration
	// holdBudget, when set with hold, cuts a hold short so that the
	// request ends at least holdMargin before holdBudget has passed since
	// its client sent it (sentAtHeader): before the proxy's upstream
	// deadline, which counts from admission, later than the send. An
	// upstream still working on a request the proxy gave up on is the
	// barrier's documented bound, not what the slow upstream tests.
	holdBudget time.Duration
	nHeld      atomic.Int64
	nCut       atomic.Int64

	mu   sync.Mutex
	last int64 // the latest begin time recorded: begins are strictly ordered
	recs []check.Forward
	// gates hold the requests with these ids (after their body) until
	// the channel is closed (drain-wake).
	gates map[string]chan struct{}
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
//
// The request begins when the handler is called (request line and headers
// have arrived; a streamed body may still be on its way) and ends when its
// body has been read to the end (or failed) and any hold is over, just
// before the answer is written: the proxy cannot see the request complete
// before its end is recorded. Begin times are recorded under the lock and
// made strictly increasing, so that the begin order of two requests is
// never a tie.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, _ := strconv.ParseUint(strings.TrimSpace(r.Header.Get("Fencing-Token")), 10, 64)
	res := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	rec := check.Forward{ID: r.Header.Get(RequestIDHeader), Resource: res, Token: tok}
	if v := r.Header.Get(sequenceHeader); v != "" {
		rec.Seq, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		rec.HasSeq = true
	}
	var work time.Duration
	if v := r.Header.Get(workHeader); v != "" {
		work, _ = time.ParseDuration(v)
	}
	u.mu.Lock()
	at := max(u.clock.now(), u.last+1)
	u.last = at
	i := len(u.recs)
	id := rec.ID
	rec.At = at
	u.recs = append(u.recs, rec)
	gate := u.gates[id]
	u.mu.Unlock()

	_, _ = io.Copy(io.Discard, r.Body)
	if u.hold != nil {
		d := u.hold()
		if sent, err := strconv.ParseInt(r.Header.Get(sentAtHeader), 10, 64); err == nil && u.holdBudget > 0 && d > 0 {
			if left := time.Duration(sent+int64(u.holdBudget-holdMargin)) - time.Duration(u.clock.now()); left < d {
				d = left
				u.nCut.Add(1)
			}
		}
		if d > 0 {
			u.nHeld.Add(1)
			time.Sleep(d)
		}
	}
	if work > 0 {
		// The service's own processing time, asked for by the client: it
		// goes on whether or not the proxy is still there (a service does
		// not stop a write because its caller went away).
		u.nHeld.Add(1)
		time.Sleep(work)
	}
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
		}
	}
	end := u.clock.now()
	// The server cancels the request's context when the proxy closes the
	// connection: it gave up on the request before this answer.
	gone := r.Context().Err() != nil
	u.mu.Lock()
	u.recs[i].End, u.recs[i].Abandoned = end, gone
	u.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok\n")
}

// sequenceHeader is the proxy's default sequence header
// (FENCE_SEQUENCE_HEADER), which the upstream receives intact.
const sequenceHeader = "Fencing-Sequence"

// workHeader, when a request carries it (a Go duration), makes the upstream
// work on the request that long once its body is read, whatever happens to
// the connection meanwhile.
const workHeader = "X-Faults-Work"

// gate makes the upstream hold the request with id, once its body is read,
// until release is called (or the proxy gives up on it).
func (u *Upstream) gate(id string) (release func()) {
	ch := make(chan struct{})
	u.mu.Lock()
	if u.gates == nil {
		u.gates = map[string]chan struct{}{}
	}
	u.gates[id] = ch
	u.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			u.mu.Lock()
			delete(u.gates, id)
			u.mu.Unlock()
			close(ch)
		})
	}
}

// holdMargin is how long before the proxy's deadline a held request ends
// at the latest (see holdBudget).
const holdMargin = 500 * time.Millisecond

// Held returns how many requests the upstream held; Cut how many holds it
// cut short (or skipped) to end before the proxy's deadline.
func (u *Upstream) Held() int64 { return u.nHeld.Load() }
func (u *Upstream) Cut() int64  { return u.nCut.Load() }

// Forward returns what was recorded of the request with id, and whether it
// arrived.
func (u *Upstream) Forward(id string) (check.Forward, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i := len(u.recs) - 1; i >= 0; i-- {
		if u.recs[i].ID == id {
			return u.recs[i], true
		}
	}
	return check.Forward{}, false
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

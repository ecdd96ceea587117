package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The conformance suite runs each exchange twice, through Transport and
// through net/http's *http.Transport, each against a raw TCP server of its
// own that writes the case's exact bytes, and compares what each returned
// (an outcome). They must agree on every field except the ones a case
// names in differ, each with the reason; error texts are never compared,
// only their kinds (see errKind). want pins what Transport must return, so
// that the two cannot agree on something wrong.

// outcome is what one transport made of one case.
type outcome struct {
	Err           string      // RoundTrip's error, by kind ("" none)
	Status        int         // of the response RoundTrip returned
	Header        http.Header // every field, as parsed
	ContentLength int64
	Close         bool
	Body          string // as much as could be read
	BodyErr       string // the error that ended the body, by kind ("" EOF)
	Trailer       http.Header
	Hints         []string // what Got1xxResponse saw: code and Link, in order
	Dialed        bool     // a connection was dialled before the follow-up
	Wire          string   // request 1 as the server read it (its address as HOST)
	BodyClosed    bool     // req.Body was closed (within 5 s: http.Transport may close it later)
	Reused        bool     // the follow-up request went out on request 1's connection
	FollowUp      string   // what the follow-up request got
}

// want is what Transport must return for a case (and http.Transport too,
// unless the case says otherwise in ref).
type want struct {
	err    string
	status int
	body   string
	reused bool
	dialed bool
}

// conformanceCase is one exchange: request 1 (a PUT of "payload" unless
// changed) answered with answer, then a follow-up request (a PUT of
// "payload" to /next, answered properly) that shows whether request 1's
// connection was reused and whether anything of request 1's exchange leaked
// into the next one.
type conformanceCase struct {
	name   string
	method string              // of request 1; "" PUT with a body, HEAD without
	mutate func(*http.Request) // after the request is built
	answer string              // the bytes written to request 1, once it is read whole
	close  bool                // the server closes the connection after answer
	idle   string              // once request 1 is over: bytes sent on its connection, or "close"
	cancel cancelHow
	trace  bool // a Got1xxResponse hook, as ReverseProxy sets
	inline bool // Transport takes its own path (not its http.Transport fallback)
	want   want
	// differ names the outcome fields on which http.Transport may return
	// something else, and why; ref is then what it returns.
	differ []string
	why    string
	ref    *want
}

type cancelHow int

const (
	cancelNone         cancelHow = iota
	cancelBefore                 // the context is cancelled before RoundTrip
	deadlineBefore               // the context's deadline passed (and its timer fired) before RoundTrip
	deadlineFrozen               // the deadline passed by the clock, its timer not yet fired
	cancelAwaiting               // the context is cancelled once the server has read request 1
	cancelMidBody                // the context is cancelled after 3 bytes of the body
	cancelChanAwaiting           // Request.Cancel is closed once the server has read request 1
	cancelChanMidBody            // Request.Cancel is closed after 3 bytes of the body
)

const (
	chunkedOne   = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n0\r\n\r\n"
	chunkedSum   = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\none\r\n0\r\nX-Sum: 1\r\n\r\n"
	earlyHints   = "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
	partialTen   = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc" // 3 of 10 bytes
	switching    = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n"
	followUpWant = "200 answer to PUT /next"
)

var forged = rawOK("forged")

func conformanceCases() []conformanceCase {
	ok := func(body string, reused bool) want {
		return want{status: 200, body: body, reused: reused, dialed: true}
	}
	failed := func(kind string) want { return want{err: kind, dialed: true} }
	refused := want{err: "error"} // before dialling
	refWant := func(w want) *want { return &w }
	return []conformanceCase{
		// Every framing of a response, and whether it leaves the
		// connection fit for the next request.
		{name: "Content-Length body", answer: rawOK("one"), inline: true, want: ok("one", true)},
		{name: "chunked body", answer: chunkedOne, inline: true, want: ok("one", true)},
		{name: "chunked body with trailers", answer: chunkedSum, inline: true, want: ok("one", true)},
		{name: "Content-Length: 0", answer: "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", inline: true, want: ok("", true)},
		{name: "close-delimited body", answer: "HTTP/1.1 200 OK\r\n\r\nuntil the end", close: true, inline: true, want: ok("until the end", false)},
		{name: "HTTP/1.0 response", answer: "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\none", inline: true, want: ok("one", false)},
		{name: "Connection: close from the server", answer: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\none",
			inline: true, want: ok("one", false)},
		{name: "Connection: close from the client", mutate: func(r *http.Request) { r.Close = true }, answer: rawOK("one"),
			inline: true, want: ok("one", false)},
		{name: "HEAD: Content-Length, no body read", method: "HEAD", answer: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
			inline: true, want: ok("", true)},
		{name: "204: no body read", answer: "HTTP/1.1 204 No Content\r\n\r\n", inline: true, want: want{status: 204, reused: true, dialed: true}},
		{name: "304: no body read", answer: "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", inline: true,
			want: want{status: 304, reused: true, dialed: true}},
		{name: "body shorter than its Content-Length", answer: partialTen, close: true, inline: true,
			want: want{status: 200, body: "abc", dialed: true}},
		{name: "final status under 100", answer: "HTTP/1.1 099 Odd\r\nContent-Length: 3\r\n\r\none", inline: true,
			want: want{status: 99, body: "one", dialed: true}},
		{name: "not HTTP", answer: "garbage\r\n\r\n", inline: true, want: failed("error")},
		{name: "closed without an answer", close: true, inline: true, want: failed("closed")},

		// Bytes the upstream sent past the response it framed: the
		// connection must not carry another request.
		{name: "bytes after a Content-Length body", answer: rawOK("one") + forged, inline: true, want: ok("one", false)},
		{name: "bytes after the last chunk", answer: chunkedOne + forged, inline: true, want: ok("one", false)},
		{name: "bytes after the trailers", answer: chunkedSum + forged, inline: true, want: ok("one", false)},
		{name: "a body after HEAD", method: "HEAD", answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", inline: true, want: ok("", false)},
		{name: "a body after 204", answer: "HTTP/1.1 204 No Content\r\n\r\n" + forged, inline: true, want: want{status: 204, dialed: true}},
		{name: "a body after 304", answer: "HTTP/1.1 304 Not Modified\r\n\r\n" + forged, inline: true, want: want{status: 304, dialed: true}},
		{name: "bytes sent to the idle connection", answer: rawOK("one"), idle: forged, inline: true, want: ok("one", false)},
		{name: "the upstream closed the idle connection", answer: rawOK("one"), idle: "close", inline: true, want: ok("one", false)},

		// Informational responses.
		{name: "100 Continue nobody asked for", answer: "HTTP/1.1 100 Continue\r\n\r\n" + rawOK("one"), trace: true, inline: true, want: ok("one", true)},
		{name: "103 Early Hints", answer: earlyHints + rawOK("one"), trace: true, inline: true, want: ok("one", true)},
		{name: "103 Early Hints, no hook", answer: earlyHints + rawOK("one"), inline: true, want: ok("one", true)},
		{name: "16 informational responses", answer: strings.Repeat(earlyHints, 16) + rawOK("one"), trace: true, inline: true, want: ok("one", true)},
		{name: "17 informational responses", answer: strings.Repeat(earlyHints, 17) + rawOK("one"), trace: true, inline: true,
			want:   failed("error"),
			differ: []string{"Err", "Status", "Header", "ContentLength", "Body", "Hints", "Reused"},
			why: "Transport takes at most 16 informational responses, each of which ReverseProxy writes to its client; " +
				"http.Transport bounds them only by their total size, and not at all once a hook has seen them",
			ref: refWant(ok("one", true))},
		{name: "an informational response, then the connection closes", answer: earlyHints, close: true, trace: true, inline: true,
			want: failed("closed")},
		{name: "101 Switching Protocols nobody asked for", answer: switching, inline: true, want: failed("error"),
			differ: []string{"Err", "Status", "Header"},
			why: "Transport refuses it (an upgrade request takes http.Transport); http.Transport returns it with the connection " +
				"as a writable body, and leaves refusing it to its caller (ReverseProxy answers 502)",
			ref: refWant(want{status: 101, dialed: true})},
		{name: "101 without Upgrade nobody asked for", answer: "HTTP/1.1 101 Switching Protocols\r\n\r\n", inline: true, want: failed("error"),
			differ: []string{"Err", "Status", "Header"},
			why:    "as above: Transport refuses the 101, http.Transport returns it (no body, and an empty Header) and drops the connection",
			ref:    refWant(want{status: 101, dialed: true})},

		// Cancellation.
		{name: "context cancelled before RoundTrip", cancel: cancelBefore, answer: rawOK("one"), inline: true, want: want{err: "canceled"}},
		{name: "context deadline passed before RoundTrip", cancel: deadlineBefore, answer: rawOK("one"), inline: true, want: want{err: "deadline"}},
		{name: "context deadline passed by the clock, its timer not fired", cancel: deadlineFrozen, answer: rawOK("one"), inline: true,
			want:   want{err: "deadline"},
			differ: []string{"Err", "Status", "Header", "ContentLength", "Body", "Dialed", "Wire", "Reused"},
			why: "Transport checks the deadline by the clock before the first byte (a process frozen past it must send nothing); " +
				"http.Transport waits for the context's timer",
			ref: refWant(ok("one", true))},
		{name: "context cancelled awaiting the response", cancel: cancelAwaiting, inline: true, want: failed("canceled")},
		{name: "context cancelled mid-body", cancel: cancelMidBody, answer: partialTen, inline: true, want: want{status: 200, body: "abc", dialed: true}},
		{name: "Request.Cancel closed awaiting the response", cancel: cancelChanAwaiting, want: failed("error")},
		{name: "Request.Cancel closed mid-body", cancel: cancelChanMidBody, answer: partialTen, want: want{status: 200, body: "abc", dialed: true}},

		// Requests http.Transport refuses before it dials.
		{name: "method not a token", mutate: func(r *http.Request) { r.Method = "PUT /x HTTP/1.1\r\nX-Injected: 1\r\nX:" }, want: refused},
		{name: "header name with a line break", mutate: func(r *http.Request) { r.Header["X-A\r\nX-Injected"] = []string{"1"} }, want: refused},
		{name: "header name with a space", mutate: func(r *http.Request) { r.Header["X A"] = []string{"1"} }, want: refused},
		{name: "empty header name", mutate: func(r *http.Request) { r.Header[""] = []string{"1"} }, want: refused},
		{name: "header value with a line break", mutate: func(r *http.Request) { r.Header["X-A"] = []string{"1\r\nX-Injected: 1"} }, want: refused},
		{name: "header value with a NUL", mutate: func(r *http.Request) { r.Header["X-A"] = []string{"1\x002"} }, want: refused},
		{name: "no host in the URL", mutate: func(r *http.Request) { r.URL.Host = "" }, want: refused},
		{name: "nil Header", mutate: func(r *http.Request) { r.Header = nil }, want: refused},
		{name: "nil URL", mutate: func(r *http.Request) { r.URL = nil }, want: refused},
		// A dial that fails.
		{name: "connection refused", mutate: func(r *http.Request) { r.URL.Host = refusingAddr() }, inline: true, want: refused},
		// And one both refuse only once they have a connection: nothing
		// of it is written.
		{name: "control character in the query", mutate: func(r *http.Request) { r.URL.RawQuery = "a=\x01" }, inline: true,
			want: failed("error")},
	}
}

func TestConformance(t *testing.T) {
	// http.Transport logs the bytes an upstream sends to an idle
	// connection ("Unsolicited response received on idle HTTP channel").
	log.SetOutput(testLog{t})
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	transports := []struct {
		name string
		new  func(dial func(context.Context, string, string) (net.Conn, error)) http.RoundTripper
	}{
		{"upstream", func(dial func(context.Context, string, string) (net.Conn, error)) http.RoundTripper {
			return New(Options{Dial: dial})
		}},
		{"net/http", func(dial func(context.Context, string, string) (net.Conn, error)) http.RoundTripper {
			// As New configures its fallback.
			return &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 1024, ExpectContinueTimeout: time.Second, DisableCompression: true}
		}},
	}
	for _, tc := range conformanceCases() {
		t.Run(tc.name, func(t *testing.T) {
			if (len(tc.differ) > 0) != (tc.why != "") || (len(tc.differ) > 0) != (tc.ref != nil) {
				t.Fatal("a case that lets the transports differ says where (differ), why, and what http.Transport returns (ref)")
			}
			var got [2]outcome
			for i, tr := range transports {
				got[i] = runConformance(t, tc, tr.new, i == 0)
			}
			mine, ref := got[0], got[1]
			checkWant(t, "upstream", mine, tc.want)
			if tc.ref != nil {
				checkWant(t, "net/http", ref, *tc.ref)
			}
			for _, f := range differingFields(mine, ref) {
				if !slices.Contains(tc.differ, f) {
					t.Errorf("%s: upstream %#v, net/http %#v", f, field(mine, f), field(ref, f))
				}
			}
			if !mine.BodyClosed || !ref.BodyClosed {
				t.Errorf("req.Body closed: upstream %v, net/http %v; http.RoundTripper's documentation says always", mine.BodyClosed, ref.BodyClosed)
			}
			if mine.FollowUp != followUpWant || ref.FollowUp != followUpWant {
				t.Errorf("follow-up: upstream %q, net/http %q, want %q", mine.FollowUp, ref.FollowUp, followUpWant)
			}
		})
	}
}

// checkWant compares the fields a case pins.
func checkWant(t *testing.T, who string, o outcome, w want) {
	t.Helper()
	if o.Err != w.err || o.Status != w.status || o.Body != w.body || o.Reused != w.reused || o.Dialed != w.dialed {
		t.Errorf("%s: err %q, status %d, body %q, reused %v, dialed %v; want err %q, status %d, body %q, reused %v, dialed %v",
			who, o.Err, o.Status, o.Body, o.Reused, o.Dialed, w.err, w.status, w.body, w.reused, w.dialed)
	}
	if !o.Dialed && o.Wire != "" {
		t.Errorf("%s: sent %q without a connection", who, o.Wire)
	}
}

// runConformance runs tc through the transport make builds, against a
// server of its own.
func runConformance(t *testing.T, tc conformanceCase, newRT func(func(context.Context, string, string) (net.Conn, error)) http.RoundTripper, mine bool) outcome {
	t.Helper()
	s := newScriptServer(t, tc)
	// A transport that waits for what the server will never send fails
	// the case instead of hanging the suite: closing the server ends it.
	watchdog := time.AfterFunc(10*time.Second, func() {
		t.Errorf("%s: the exchange hung; the server closed its connections after 10 s", transportName(mine))
		s.close()
	})
	defer watchdog.Stop()
	dialer := &closeTracker{closed: make(map[string]chan struct{})}
	rt := newRT(dialer.dial)
	defer rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	var o outcome

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var hintsMu sync.Mutex
	if tc.trace {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			hintsMu.Lock()
			o.Hints = append(o.Hints, fmt.Sprintf("%d %s", code, h.Get("Link")))
			hintsMu.Unlock()
			return nil
		}})
	}
	cancelCh := make(chan struct{})
	stop := cancel
	switch tc.cancel {
	case cancelBefore:
		cancel()
	case deadlineBefore:
		ctx, cancel = context.WithDeadline(ctx, time.Now().Add(-time.Millisecond))
		defer cancel()
	case deadlineFrozen:
		ctx = frozenCtx{Context: ctx, d: time.Now().Add(-time.Millisecond)}
	case cancelChanAwaiting, cancelChanMidBody:
		stop = func() { close(cancelCh) }
	}
	method := tc.method
	var body *closeRecorder
	if method == "" {
		method = "PUT"
		body = &closeRecorder{Reader: strings.NewReader("payload")}
	}
	req, err := http.NewRequestWithContext(ctx, method, s.url+"/one", nil)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Body, req.ContentLength = body, int64(len("payload"))
	}
	if tc.cancel == cancelChanAwaiting || tc.cancel == cancelChanMidBody {
		req.Cancel = cancelCh
	}
	if tc.mutate != nil {
		tc.mutate(req)
	}
	if mine && canPeek {
		if got := inline(req); got != tc.inline {
			t.Errorf("Transport takes its own path: %v, the case says %v", got, tc.inline)
		}
	}
	if tc.cancel == cancelAwaiting || tc.cancel == cancelChanAwaiting {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-s.seen:
				stop()
			case <-done:
			}
		}()
	}

	resp, err := rt.RoundTrip(req)
	o.Err = errKind(err)
	if err != nil {
		t.Logf("%s: RoundTrip: %v", transportName(mine), err)
	}
	if err == nil {
		o.Status, o.Header, o.ContentLength, o.Close = resp.StatusCode, resp.Header, resp.ContentLength, resp.Close
		var b []byte
		var berr error
		switch {
		case resp.StatusCode == http.StatusSwitchingProtocols:
			// The body, if writable, is the connection: not read.
		case tc.cancel == cancelMidBody || tc.cancel == cancelChanMidBody:
			b = make([]byte, 3)
			if _, berr = io.ReadFull(resp.Body, b); berr == nil {
				stop()
				var rest []byte
				rest, berr = io.ReadAll(resp.Body)
				b = append(b, rest...)
			}
		default:
			b, berr = io.ReadAll(resp.Body)
		}
		o.Body, o.BodyErr, o.Trailer = string(b), errKind(berr), resp.Trailer // io.ReadAll hides EOF
		if berr != nil {
			t.Logf("%s: body: %v", transportName(mine), berr)
		}
		_ = resp.Body.Close()
	}
	o.BodyClosed = body == nil || waitFor(5*time.Second, body.closed.Load)

	switch tc.idle {
	case "":
	case "close":
		s.closeFirst()
	default:
		s.writeFirst(tc.idle)
	}
	// Before the follow-up, wait until a connection that must not be
	// reused is known not to be: http.Transport's read loop drops it
	// shortly after the response (or the bytes) arrived, not before, and
	// Transport looks at its idle connections only when it takes one.
	expectReuse := tc.want.reused
	if !mine && tc.ref != nil {
		expectReuse = tc.ref.reused
	}
	if first := s.first(); first != "" && !expectReuse {
		waitFor(10*time.Second, func() bool {
			if dialer.isClosed(first) {
				return true
			}
			u, ok := rt.(*Transport)
			return ok && canPeek && u.idleUnfit()
		})
	}

	o.Dialed = dialer.dialled() > 0
	o.Wire = strings.ReplaceAll(s.firstWire(), s.addr, "HOST")
	firstConn := s.firstConn()
	next, _ := http.NewRequest("PUT", s.url+"/next", strings.NewReader("payload"))
	if resp, err := rt.RoundTrip(next); err != nil {
		o.FollowUp = "error: " + err.Error()
	} else {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		o.FollowUp = fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	o.Reused = firstConn != 0 && s.connOf("/next") == firstConn
	hintsMu.Lock()
	defer hintsMu.Unlock()
	return o
}

func transportName(mine bool) string {
	if mine {
		return "upstream"
	}
	return "net/http"
}

// errKind is what the suite compares of an error: texts differ between
// the transports, kinds must not.
func errKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed"
	}
	return "error"
}

// refusingAddr returns the address of a port that was just listened on and
// closed: dials to it are refused.
func refusingAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// idleUnfit reports whether t holds idle connections and none of them
// could carry another request (its peer closed it, or sent bytes to it).
func (t *Transport) idleUnfit() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, conns := range t.idle {
		for _, c := range conns {
			if c.alive() {
				return false
			}
			n++
		}
	}
	return n > 0
}

func differingFields(a, b outcome) []string {
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, va.Type().Field(i).Name)
		}
	}
	return out
}

func field(o outcome, name string) any { return reflect.ValueOf(o).FieldByName(name).Interface() }

func waitFor(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// closeTracker dials TCP connections and records which ones the client
// closed, by their local address (the server's remote one). The
// connection keeps its *net.TCPConn methods, so Transport can still look
// at it while it is idle.
type closeTracker struct {
	mu     sync.Mutex
	closed map[string]chan struct{}
}

type trackedConn struct {
	*net.TCPConn
	once   sync.Once
	closed chan struct{}
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.TCPConn.Close()
}

func (d *closeTracker) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{TCPConn: c.(*net.TCPConn), closed: make(chan struct{})}
	d.mu.Lock()
	d.closed[c.LocalAddr().String()] = tc.closed
	d.mu.Unlock()
	return tc, nil
}

func (d *closeTracker) dialled() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.closed)
}

func (d *closeTracker) isClosed(local string) bool {
	d.mu.Lock()
	ch := d.closed[local]
	d.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// scriptServer answers request 1 of a case with the case's bytes, and
// every request to /next with a proper response. It numbers its
// connections from 1 and records the bytes it read on each.
type scriptServer struct {
	ln        net.Listener
	addr, url string
	tc        conformanceCase
	seen      chan struct{} // closed when request 1 has been read whole

	mu     sync.Mutex
	conns  []*scriptConn
	byPath map[string]int // the connection each path arrived on (the last time)
	wire   string         // request 1, as read
	one    *scriptConn    // request 1's connection
	closed bool
	wg     sync.WaitGroup
}

type scriptConn struct {
	net.Conn
	id   int
	s    *scriptServer
	read []byte // everything read so far, under s.mu
}

func (c *scriptConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.s.mu.Lock()
	c.read = append(c.read, p[:n]...)
	c.s.mu.Unlock()
	return n, err
}

func newScriptServer(t *testing.T, tc conformanceCase) *scriptServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptServer{ln: ln, addr: ln.Addr().String(), tc: tc, seen: make(chan struct{}), byPath: map[string]int{}}
	s.url = "http://" + s.addr
	s.wg.Go(s.accept)
	t.Cleanup(s.close)
	return s
}

func (s *scriptServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		sc := &scriptConn{Conn: c, id: len(s.conns) + 1, s: s}
		s.conns = append(s.conns, sc)
		s.wg.Go(func() { s.serve(sc) })
		s.mu.Unlock()
	}
}

func (s *scriptServer) serve(c *scriptConn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		s.mu.Lock()
		s.byPath[req.URL.Path] = c.id
		first := req.URL.Path != "/next" && s.one == nil
		if first {
			s.one, s.wire = c, string(c.read)
		}
		s.mu.Unlock()
		if !first {
			if _, err := io.WriteString(c, realAnswer(req)); err != nil {
				return
			}
			continue
		}
		close(s.seen)
		if _, err := io.WriteString(c, s.tc.answer); err != nil || s.tc.close {
			return
		}
	}
}

func (s *scriptServer) first() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.one == nil {
		return ""
	}
	return s.one.RemoteAddr().String()
}

func (s *scriptServer) firstConn() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.one == nil {
		return 0
	}
	return s.one.id
}

func (s *scriptServer) firstWire() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wire
}

func (s *scriptServer) connOf(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byPath[path]
}

// writeFirst sends raw, unasked, on request 1's connection.
func (s *scriptServer) writeFirst(raw string) {
	s.mu.Lock()
	c := s.one
	s.mu.Unlock()
	if c != nil {
		_, _ = io.WriteString(c, raw)
	}
}

// closeFirst closes request 1's connection.
func (s *scriptServer) closeFirst() {
	s.mu.Lock()
	c := s.one
	s.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

func (s *scriptServer) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	s.closed = true
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// testLog sends the log package's output to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

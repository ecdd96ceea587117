package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"time"
)

// upstreamTransport forwards the common request on the handler's own
// goroutine: the request line, headers and a small body leave in one write,
// and the response is read right there. http.Transport hands every request to
// a writeLoop goroutine and every response back from a readLoop goroutine, and
// flushes a PUT's headers before its body; on a sidecar's loopback hop those
// two handoffs and the extra write were most of the proxy's CPU per request
// (docs/performance.md).
//
// Only what this path handles exactly as http.Transport would takes it: plain
// http, a body of known length up to maxInlineBody, no Expect, no Upgrade, no
// trailers. Everything else goes to the fallback Transport unchanged, so
// upgrades, streamed uploads and 100-continue keep net/http's behaviour.
//
// The request is written with (*http.Request).Write and the response parsed
// with http.ReadResponse: the wire format is net/http's own; only the
// connection handling is ours.
type upstreamTransport struct {
	fallback    *http.Transport
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int
	idleTimeout time.Duration

	mu   sync.Mutex
	idle map[string][]*upConn // by host:port, most recently used last
	// sweep closes connections idle for idleTimeout, as http.Transport
	// does, so that a burst's connections do not stay open (or, once the
	// upstream has closed its end, half-closed) until traffic returns. It is
	// armed while any connection is idle.
	sweep *time.Timer
}

const (
	// maxInlineBody bounds the bodies written before the response is read.
	// The write cannot overlap the read, so an upstream that answers early
	// and stops reading must still be able to take the whole body into its
	// socket buffer: 64 KiB is under Linux's default receive buffer (128 KiB).
	maxInlineBody = 64 << 10
	// maxResponseHeader is http.Transport's default limit on response
	// headers (MaxResponseHeaderBytes 0 means 10 MiB).
	maxResponseHeader = 10 << 20
	// max1xx bounds the informational responses before the final one.
	max1xx = 16
)

// inline reports whether req takes the handler-goroutine path.
func inline(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.Method == http.MethodConnect {
		return false
	}
	if req.ContentLength < 0 || req.ContentLength > maxInlineBody ||
		(req.ContentLength == 0 && req.Body != nil && req.Body != http.NoBody) { // length unknown
		return false
	}
	if len(req.TransferEncoding) != 0 || len(req.Trailer) != 0 {
		return false
	}
	// ReverseProxy re-adds Upgrade for an upgrade request after it strips
	// the hop-by-hop headers; Expect asks for a concurrent read and write.
	_, upgrade := req.Header["Upgrade"]
	_, expect := req.Header["Expect"]
	return !upgrade && !expect
}

func (t *upstreamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if pastDeadline(req.Context()) {
		// Checked by the clock before the first byte: an admitted request
		// whose upstream deadline passed (the process was frozen, say) is no
		// longer in flight for the other replicas, and must not be sent.
		return nil, &notSentError{errPastDeadline}
	}
	if !canPeek || !inline(req) {
		// Where an idle connection cannot be looked at (!canPeek), bytes the
		// upstream sent to it while idle would be read as the next request's
		// response; http.Transport's read loop sees them, so there it takes
		// every request.
		return t.roundTripFallback(req)
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		// The client left during admission: send nothing (the cancellation
		// hook below would race the write).
		return nil, err
	}
	addr := upstreamAddr(req)
	wrote := false // by an earlier attempt
	for attempt := 0; ; attempt++ {
		c, err := t.get(ctx, addr)
		if err != nil {
			// get fails only in the dial. After an attempt that wrote, the
			// upstream may have the request even though this dial failed.
			if !wrote {
				err = &notSentError{err}
			}
			return nil, err
		}
		resp, err := c.roundTrip(t, req)
		if err == nil {
			return resp, nil
		}
		wrote = wrote || c.written > 0
		if errors.Is(err, errPastDeadline) {
			if !wrote {
				err = &notSentError{err}
			}
			return nil, err
		}
		if cerr := ctx.Err(); cerr != nil {
			// The deadline we set to unblock the connection shows up as an
			// i/o timeout; say what really happened, as http.Transport does.
			return nil, cerr
		}
		// A reused connection can have been closed by the upstream just
		// before we wrote. Like http.Transport, send again only if no byte
		// left and nothing of the request was consumed (no body), or if the
		// request may be repeated.
		if attempt == 0 && c.reused && ((c.written == 0 && req.ContentLength == 0) || replayable(req) && c.read == 0) {
			continue
		}
		return nil, err
	}
}

// roundTripFallback sends req through http.Transport and, when its dial
// failed before it ever got a connection, says that nothing was sent.
// http.Transport writes only on a connection it got, and reports each one
// to GotConn first (HTTP/1 and HTTP/2 alike); a dial error after a retry
// follows an attempt that may have written, so it is not marked.
func (t *upstreamTransport) roundTripFallback(req *http.Request) (*http.Response, error) {
	var gotConn atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) }}
	resp, err := t.fallback.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	var oe *net.OpError
	if err != nil && !gotConn.Load() && errors.As(err, &oe) && oe.Op == "dial" {
		err = &notSentError{err}
	}
	return resp, err
}

// notSentError is an upstream failure before any byte of the request left:
// the upstream could not be reached (refused, unroutable, unresolvable, or
// the dial timed out), so it has not seen the request.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return "request not sent: " + e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// replayable is http.Transport's rule for requests it may send twice.
func replayable(req *http.Request) bool {
	if req.ContentLength != 0 {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

func upstreamAddr(req *http.Request) string {
	if req.URL.Port() != "" {
		return req.URL.Host
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

// get returns an idle connection to addr that is still open, or dials one.
func (t *upstreamTransport) get(ctx context.Context, addr string) (*upConn, error) {
	now := time.Now()
	t.mu.Lock()
	for {
		conns := t.idle[addr]
		if len(conns) == 0 {
			break
		}
		c := conns[len(conns)-1]
		conns[len(conns)-1] = nil
		t.idle[addr] = conns[:len(conns)-1]
		t.mu.Unlock()
		// An idle connection has no reader, so nobody noticed if the
		// upstream closed it or sent bytes nobody asked for (http.Transport's
		// readLoop would have): look.
		if now.Sub(c.idleSince) < t.idleTimeout && c.alive() {
			c.reused = true
			return c, nil
		}
		c.close()
		t.mu.Lock()
	}
	t.mu.Unlock()

	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &upConn{conn: nc, key: addr}
	c.br = bufio.NewReaderSize(c, 4<<10)
	c.bw = bufio.NewWriterSize(c, 8<<10)
	c.initPeek()
	return c, nil
}

// put keeps c for the next request, or closes it if the pool is full or the
// upstream sent more than the response it framed.
func (t *upstreamTransport) put(c *upConn) {
	if c.br.Buffered() != 0 {
		// Bytes past the end of the response (beyond its Content-Length or
		// terminating chunk, a body after a HEAD, 204 or 304): the next
		// request on c would read them as its response, one the upstream
		// never sent it. http.Transport drops such a connection too.
		c.close()
		return
	}
	c.idleSince = time.Now()
	t.mu.Lock()
	if len(t.idle[c.key]) < t.maxIdle {
		if t.idle == nil {
			t.idle = make(map[string][]*upConn)
		}
		t.idle[c.key] = append(t.idle[c.key], c)
		if t.sweep == nil {
			t.sweep = time.AfterFunc(t.idleTimeout, t.sweepIdle)
		}
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	c.close()
}

// sweepIdle closes the connections idle for idleTimeout or longer and arms
// itself again for the oldest of the rest.
func (t *upstreamTransport) sweepIdle() {
	now := time.Now()
	var expired []*upConn
	var oldest time.Time
	t.mu.Lock()
	for addr, conns := range t.idle {
		kept := conns[:0]
		for _, c := range conns {
			if now.Sub(c.idleSince) >= t.idleTimeout {
				expired = append(expired, c)
				continue
			}
			if oldest.IsZero() || c.idleSince.Before(oldest) {
				oldest = c.idleSince
			}
			kept = append(kept, c)
		}
		clear(conns[len(kept):])
		t.idle[addr] = kept
	}
	t.sweep = nil
	if !oldest.IsZero() {
		t.sweep = time.AfterFunc(oldest.Add(t.idleTimeout).Sub(now), t.sweepIdle)
	}
	t.mu.Unlock()
	for _, c := range expired {
		c.close()
	}
}

// CloseIdleConnections closes the idle connections of both paths.
func (t *upstreamTransport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, conns := range idle {
		for _, c := range conns {
			c.close()
		}
	}
	t.fallback.CloseIdleConnections()
}

// upConn is one connection to the upstream. It is owned by one request at a
// time: from get to the end of the response body.
type upConn struct {
	conn      net.Conn
	key       string // the address dialled, the pool's key
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	reused    bool
	// written and read count the bytes of the current exchange, to tell a
	// connection that failed before anything crossed it.
	written, read int64
	// readLimit bounds the response header bytes (see maxResponseHeader).
	readLimit int64
	// sendBy is the current request's upstream deadline (zero: none): no
	// write starts after it.
	sendBy time.Time
	peek   peeker
}

var errHeaderTooLarge = errors.New("proxy: upstream response headers exceed 10 MiB")

func (c *upConn) Read(p []byte) (int, error) {
	if c.readLimit <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > c.readLimit {
		p = p[:c.readLimit]
	}
	n, err := c.conn.Read(p)
	c.read += int64(n)
	c.readLimit -= int64(n)
	return n, err
}

func (c *upConn) Write(p []byte) (int, error) {
	if !c.sendBy.IsZero() && !time.Now().Before(c.sendBy) {
		return 0, errPastDeadline
	}
	n, err := c.conn.Write(p)
	c.written += int64(n)
	return n, err
}

func (c *upConn) close() { _ = c.conn.Close() }

// aLongTimeAgo is a deadline in the past: setting it unblocks a read or
// write in progress.
var aLongTimeAgo = time.Unix(1, 0)

// noHeaderFlush hides the *bufio.Writer type from (*http.Request).Write,
// which otherwise flushes the headers on their own before a body it cannot
// see is in memory: one write for the whole request instead of two.
type noHeaderFlush struct{ *bufio.Writer }

// roundTrip writes req and reads its response on c. On error c is closed.
func (c *upConn) roundTrip(t *upstreamTransport, req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	// The handler's goroutine blocks in Write and Read below; a cancelled
	// request (the client left, the server shuts down) unblocks it.
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		c.close()
		return nil, err
	}
	c.written, c.read = 0, 0
	c.sendBy, _ = ctx.Deadline()
	if err := req.Write(noHeaderFlush{c.bw}); err != nil {
		return fail(err)
	}
	if err := c.bw.Flush(); err != nil {
		return fail(err)
	}

	var trace *httptrace.ClientTrace
	c.readLimit = maxResponseHeader
	var resp *http.Response
	for n := 0; ; n++ {
		var err error
		if resp, err = http.ReadResponse(c.br, req); err != nil {
			return fail(err)
		}
		code := resp.StatusCode
		if code >= 200 {
			break
		}
		if code == http.StatusSwitchingProtocols || n == max1xx {
			// Nothing asked for an upgrade on this path.
			return fail(errors.New("proxy: upstream sent " + resp.Status + " to a request that did not ask for it"))
		}
		// An informational response (103 Early Hints): ReverseProxy forwards
		// it to the client through this hook, as with http.Transport.
		if trace == nil {
			trace = httptrace.ContextClientTrace(ctx)
		}
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return fail(err)
			}
		}
	}
	c.readLimit = math.MaxInt64

	reuse := !resp.Close && !req.Close
	if resp.Body == http.NoBody {
		// HEAD, 204, 304 or an empty body: the exchange is over.
		finish(t, c, stop, reuse)
		return resp, nil
	}
	resp.Body = &upBody{body: resp.Body, c: c, t: t, stop: stop, reuse: reuse}
	return resp, nil
}

// finish ends an exchange on c: back to the pool if its response was read to
// the end and the cancellation hook never fired, closed otherwise.
func finish(t *upstreamTransport, c *upConn, stop func() bool, reuse bool) {
	if stop() && reuse {
		t.put(c)
		return
	}
	c.close()
}

// upBody is a response body that gives its connection back when read to EOF.
type upBody struct {
	body  io.ReadCloser
	c     *upConn // nil once finished
	t     *upstreamTransport
	stop  func() bool
	reuse bool
	eof   bool
}

var errBodyClosed = errors.New("proxy: read on closed upstream response body")

func (b *upBody) Read(p []byte) (int, error) {
	if b.c == nil {
		if b.eof {
			return 0, io.EOF
		}
		return 0, errBodyClosed
	}
	n, err := b.body.Read(p)
	if err != nil {
		c := b.c
		b.c, b.eof = nil, err == io.EOF
		finish(b.t, c, b.stop, b.reuse && b.eof)
	}
	return n, err
}

// Close before EOF drops the connection: it is in the middle of a response,
// and draining an unbounded stream could block forever.
func (b *upBody) Close() error {
	if b.c != nil {
		c := b.c
		b.c = nil
		finish(b.t, c, b.stop, false)
	}
	return nil
}

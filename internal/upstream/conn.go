package upstream

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
	"time"
)

// upConn is one connection of the inline path. It is owned by one request
// at a time: from get to the end of the response body.
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
	// sendBy is the current request's deadline (zero: none): no write
	// starts after it; one that would fails with pastDeadline.
	sendBy       time.Time
	pastDeadline error
	// ctx is the current request's context, nil while idle.
	ctx  context.Context
	peek peeker
}

var (
	errHeaderTooLarge = errors.New("upstream: response headers exceed 10 MiB")
	errUnasked101     = errors.New("upstream: 101 Switching Protocols in answer to a request that did not ask for an upgrade")
	errTooMany1xx     = errors.New("upstream: more than 16 informational (1xx) responses before the final one")
)

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
		return 0, c.pastDeadline
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
// The request is written as (*http.Request).Write writes it (write.go) and
// the response parsed with http.ReadResponse: the wire format is net/http's
// own.
func (c *upConn) roundTrip(t *Transport, req *http.Request, info Informational) (*http.Response, error) {
	ctx := req.Context()
	// The caller's goroutine blocks in Write and Read below; a cancelled
	// request (the client left, the server shuts down) unblocks it.
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		c.close()
		return nil, err
	}
	c.written, c.read = 0, 0
	c.ctx = ctx
	c.sendBy, _ = ctx.Deadline()
	if err := writeRequest(c.bw, req); err != nil {
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
		if code < 100 || code >= 200 {
			// Final. (ReadResponse takes any three digits; like
			// http.Transport, only 1xx is informational.)
			break
		}
		if code == http.StatusSwitchingProtocols {
			// Nothing asked for an upgrade on this path: an upgrade
			// request goes to http.Transport.
			return fail(errUnasked101)
		}
		if n == max1xx {
			return fail(errTooMany1xx)
		}
		// An informational response (103 Early Hints): a reverse proxy
		// forwards it to the client through info or the trace's hook, as
		// with http.Transport.
		if info != nil {
			if err := info.Informational(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return fail(err)
			}
			continue
		}
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

	// http.Transport does not keep a connection after a final status
	// under 200 either.
	reuse := !resp.Close && !req.Close && resp.StatusCode >= 200
	if resp.Body == http.NoBody {
		// HEAD, 204, 304 or an empty body: the exchange is over.
		finish(t, c, stop, reuse)
		return resp, nil
	}
	resp.Body = &upBody{body: resp.Body, c: c, t: t, stop: stop, reuse: reuse}
	return resp, nil
}

// finish ends an exchange on c: back to the pool if its response was read to
// the end and the cancellation hook never fired, closed otherwise. It
// reports whether the hook had fired.
func finish(t *Transport, c *upConn, stop func() bool, reuse bool) (cancelled bool) {
	if !stop() {
		c.close()
		return true
	}
	if reuse {
		t.put(c)
		return false
	}
	c.close()
	return false
}

// upBody is a response body that gives its connection back when read to EOF.
type upBody struct {
	body  io.ReadCloser
	c     *upConn // nil once finished
	t     *Transport
	stop  func() bool
	reuse bool
	eof   bool
}

var errBodyClosed = errors.New("upstream: read on closed response body")

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
		if finish(b.t, c, b.stop, b.reuse && b.eof) && !b.eof {
			// The cancellation hook cut the read short: say why, as
			// http.Transport does, not the i/o timeout it caused. (c was
			// closed, not pooled: its ctx is still this request's.)
			err = context.Cause(c.ctx)
		}
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

package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// MaxInlineBody bounds the request bodies written on the handler-goroutine
// path, where the whole request is written before the response is read. The
// write cannot overlap the read, so an upstream that answers early and stops
// reading must still be able to take the whole body into its socket buffer:
// 64 KiB is under Linux's default receive buffer (128 KiB). A larger body
// goes through http.Transport.
const MaxInlineBody = 64 << 10

const (
	// maxResponseHeader is http.Transport's default limit on response
	// headers (MaxResponseHeaderBytes 0 means 10 MiB). On the inline path it
	// bounds the informational responses and the final one together.
	maxResponseHeader = 10 << 20
	// max1xx bounds the informational responses before the final one. Each
	// is handed to the Got1xxResponse hook (which ReverseProxy turns into a
	// write to its client); http.Transport bounds them by size only.
	max1xx = 16
)

// Options configures a Transport. The zero value is what a sidecar wants
// for its hop to one upstream over loopback.
type Options struct {
	// Dial opens the connections of both paths. If nil, a net.Dialer with
	// a 5 s timeout and 30 s keep-alive.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdlePerHost is how many idle keep-alive connections each path
	// keeps to one upstream. If not positive, 1024: the whole traffic goes
	// to one host, and http.Transport's default of 2 would churn a
	// connection per request under load.
	MaxIdlePerHost int
	// IdleTimeout closes a connection idle that long. If zero, 90 s.
	IdleTimeout time.Duration
	// PastDeadline is the error a request fails with when its context's
	// deadline has passed by the clock: before its first byte (then wrapped
	// in NotSentError) or, on the inline path, before a later write. A
	// request body's Read may return it too (or an error wrapping it), to
	// apply the same rule to the bytes it hands over; the transport treats
	// that alike. If nil, ErrPastDeadline.
	PastDeadline error
}

// ErrPastDeadline is the default Options.PastDeadline. It wraps
// context.DeadlineExceeded.
var ErrPastDeadline error = pastDeadlineError{}

type pastDeadlineError struct{}

func (pastDeadlineError) Error() string {
	return "upstream: the request's deadline passed: nothing more is sent"
}
func (pastDeadlineError) Unwrap() error { return context.DeadlineExceeded }

// NotSentError is a RoundTrip failure before any byte of the request left:
// the upstream could not be reached (refused, unroutable, unresolvable, the
// dial timed out), or the request's deadline had passed by the clock. The
// upstream has not seen the request, so sending it again cannot apply it
// twice. An error without it may have come after part of the request was
// written.
type NotSentError struct{ Err error }

func (e *NotSentError) Error() string { return "request not sent: " + e.Err.Error() }
func (e *NotSentError) Unwrap() error { return e.Err }

// Transport is the http.RoundTripper described in the package doc: the
// common request on the caller's goroutine, everything else through an
// *http.Transport. Make one with New.
type Transport struct {
	fallback     *http.Transport
	dial         func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle      int
	idleTimeout  time.Duration
	pastDeadline error

	mu   sync.Mutex
	idle map[string][]*upConn // by host:port, most recently used last
	// sweep closes connections idle for idleTimeout, as http.Transport
	// does, so that a burst's connections do not stay open (or, once the
	// upstream has closed its end, half-closed) until traffic returns. It is
	// armed while any connection is idle.
	sweep *time.Timer
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport configured by o.
func New(o Options) *Transport {
	t := &Transport{
		dial:         o.Dial,
		maxIdle:      o.MaxIdlePerHost,
		idleTimeout:  o.IdleTimeout,
		pastDeadline: o.PastDeadline,
	}
	if t.dial == nil {
		t.dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	if t.maxIdle <= 0 {
		t.maxIdle = 1024
	}
	if t.idleTimeout == 0 {
		t.idleTimeout = 90 * time.Second
	}
	if t.pastDeadline == nil {
		t.pastDeadline = ErrPastDeadline
	}
	t.fallback = &http.Transport{
		Proxy:                 nil, // never route the hop through HTTP_PROXY
		DialContext:           t.dial,
		MaxIdleConns:          t.maxIdle,
		MaxIdleConnsPerHost:   t.maxIdle,
		IdleConnTimeout:       t.idleTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	return t
}

// inline reports whether req takes the handler-goroutine path: only what
// this path handles exactly as http.Transport would.
func inline(req *http.Request) bool {
	if req.URL == nil || req.Header == nil || req.Cancel != nil {
		// http.Transport refuses the first two with its own errors, and
		// watches the deprecated Cancel channel.
		return false
	}
	if req.URL.Scheme != "http" || req.URL.Host == "" || req.Method == http.MethodConnect {
		return false
	}
	if req.ContentLength < 0 || req.ContentLength > MaxInlineBody ||
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
	if upgrade || expect {
		return false
	}
	// (*http.Request).Write checks neither the method nor the header
	// fields, and would send a name with a line break in it as it is;
	// http.Transport refuses such a request before it dials, with its own
	// error.
	return validMethod(req.Method) && validHeader(req.Header)
}

// RoundTrip sends req and returns its response, as http.RoundTripper says:
// req.Body is closed whatever happens, and the response body must be read
// to EOF and closed for its connection to be reused.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.RoundTripInformational(req, nil)
}

// Informational takes the informational (1xx) responses that come before a
// request's final one, as httptrace.ClientTrace's Got1xxResponse does; an
// error it returns ends the exchange with that error.
type Informational interface {
	Informational(code int, header textproto.MIMEHeader) error
}

// RoundTripInformational is RoundTrip, with the informational responses
// going to info (nil: to the Got1xxResponse of the request's
// httptrace.ClientTrace, if any, as with RoundTrip). It spares a caller
// that relays them (a reverse proxy) a ClientTrace and a context per
// request. On the requests http.Transport takes, a ClientTrace already in
// the request's context sees them too, and its answer is the one that
// counts (httptrace composes the two hooks).
func (t *Transport) RoundTripInformational(req *http.Request, info Informational) (*http.Response, error) {
	if pastDeadline(req.Context()) {
		// Checked by the clock before the first byte: a request whose
		// deadline passed while the process was frozen, say, must not be
		// sent even though its context's timer has not fired yet.
		closeBody(req)
		return nil, &NotSentError{t.pastDeadline}
	}
	if !canPeek || !inline(req) {
		// Where an idle connection cannot be looked at (!canPeek), bytes the
		// upstream sent to it while idle would be read as the next request's
		// response; http.Transport's read loop sees them, so there it takes
		// every request.
		return t.roundTripFallback(req, info)
	}
	ctx := req.Context()
	if ctx.Err() != nil {
		// Cancelled before anything was sent: send nothing (the
		// cancellation hook of the exchange would race the write).
		closeBody(req)
		return nil, context.Cause(ctx)
	}
	addr := hostPort(req)
	wrote := false // by an earlier attempt
	for attempt := 0; ; attempt++ {
		c, err := t.get(ctx, addr)
		if err != nil {
			// get fails only in the dial. After an attempt that wrote, the
			// upstream may have the request even though this dial failed.
			closeBody(req)
			if !wrote {
				err = &NotSentError{err}
			}
			return nil, err
		}
		// From here req.Write closes the body, whatever happens.
		resp, err := c.roundTrip(t, req, info)
		if err == nil {
			return resp, nil
		}
		wrote = wrote || c.written > 0
		if errors.Is(err, t.pastDeadline) {
			if !wrote {
				err = &NotSentError{err}
			}
			return nil, err
		}
		if ctx.Err() != nil {
			// The deadline we set to unblock the connection shows up as an
			// i/o timeout; say what really happened, as http.Transport does.
			return nil, context.Cause(ctx)
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

// roundTripFallback sends req through http.Transport (the informational
// responses to info, when not nil) and, when its dial
// failed before it ever got a connection, says that nothing was sent.
// http.Transport writes only on a connection it got, and reports each one
// to GotConn first (HTTP/1 and HTTP/2 alike); a dial error after a retry
// follows an attempt that may have written, so it is not marked.
func (t *Transport) roundTripFallback(req *http.Request, info Informational) (*http.Response, error) {
	var gotConn atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) }}
	if info != nil {
		trace.Got1xxResponse = info.Informational
	}
	resp, err := t.fallback.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	var oe *net.OpError
	if err != nil && !gotConn.Load() && errors.As(err, &oe) && oe.Op == "dial" {
		err = &NotSentError{err}
	}
	return resp, err
}

// pastDeadline reports whether ctx's deadline has passed by the clock, not
// by its timer: a process that was frozen resumes with timers that have not
// fired yet.
func pastDeadline(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

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

// hostPort is the address to dial for req, the pool's key.
func hostPort(req *http.Request) string {
	if req.URL.Port() != "" {
		return req.URL.Host
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

// validMethod is http.Transport's check of the method: empty (GET) or a
// token.
func validMethod(m string) bool {
	return m == "" || httpguts.ValidHeaderFieldName(m) // a method is a token, as a field name is
}

// validHeader is http.Transport's check of outgoing header fields, with
// its functions.
func validHeader(h http.Header) bool {
	for name, values := range h {
		if !httpguts.ValidHeaderFieldName(name) {
			return false
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}

package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// NewTransport returns the RoundTripper that forwards to the upstream:
// internal/upstream's, the handler-goroutine path for the common request and
// an http.Transport for the rest, which sends nothing once a request's
// upstream deadline has passed (errPastDeadline).
func NewTransport() http.RoundTripper {
	return upstream.New(upstream.Options{PastDeadline: errPastDeadline})
}

// newForwarder builds the reverse proxy for one route. It uses Rewrite, not
// Director: Rewrite runs after hop-by-hop headers are stripped, so nothing the
// client lists in Connection can remove what Rewrite sets (golang/go#50580).
// The handler has already refused a Connection header naming the token.
//
// Every forwarded request carries a request id (requestid.go): the one the
// handler gave it or the client sent, else a new one set here. The answer
// returns it: ModifyResponse puts it in place of any X-Request-Id of the
// upstream's response, the error handler on its problem.
//
// The common request takes the direct path (direct.go), the same rewrite,
// response hook and error handler without the rest of ReverseProxy.
func newForwarder(upstream *url.URL, tr http.RoundTripper, log *zap.Logger, m *routeMetrics, route string) *forwarder {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			// A sidecar is transparent: keep the Host the client asked for (the
			// app may build absolute URLs or route virtual hosts from it).
			pr.Out.Host = pr.In.Host
			setXForwarded(pr)
			requestID(pr.Out.Header)
		},
		Transport:  tr,
		BufferPool: copyBuffers,
		ModifyResponse: func(resp *http.Response) error {
			c := resp.StatusCode / 100
			if c < 1 || c > 5 {
				c = 0
			}
			m.upstreamClass[c].Inc()
			if x := exchangeOf(resp.Request); x != nil {
				x.keepReading(resp)
			}
			if resp.Request != nil {
				if id := resp.Request.Header[HeaderRequestID]; len(id) == 1 {
					if resp.Header == nil { // a RoundTripper's own response may have none
						resp.Header = make(http.Header, 1)
					}
					resp.Header[HeaderRequestID] = id
				}
			}
			return nil
		},
		// FlushInterval 0: responses are streamed and flushed as the upstream
		// writes them when they have no length or are event streams, the
		// ReverseProxy default.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				// The client went away; nobody reads the answer. Count nothing.
				w.WriteHeader(499)
				return
			}
			p := upstreamProblem(err, route)
			m.upstreamErrors.Inc()
			log.Warn("upstream failed", requestFields(r, zap.Int("status", p.Status), zap.Error(err))...)
			returnRequestID(w, r.Header)
			writeProblem(w, p)
		},
	}
	return &forwarder{rp: rp, info: informational(tr), log: log}
}

// setXForwarded is httputil.ProxyRequest.SetXForwarded (X-Forwarded-For,
// -Host and -Proto, the client's address appended to what the outgoing
// request already has) with the three values in one allocation instead of
// one each. Their slices have room for one value only, so an Add to any
// copies it first.
func setXForwarded(pr *httputil.ProxyRequest) {
	vals := make([]string, 3)
	h := pr.Out.Header
	if clientIP, _, err := net.SplitHostPort(pr.In.RemoteAddr); err == nil {
		if prior := h["X-Forwarded-For"]; len(prior) > 0 {
			clientIP = strings.Join(prior, ", ") + ", " + clientIP
		}
		vals[0] = clientIP
		h["X-Forwarded-For"] = vals[0:1:1]
	} else {
		delete(h, "X-Forwarded-For")
	}
	vals[1] = pr.In.Host
	h["X-Forwarded-Host"] = vals[1:2:2]
	vals[2] = "http"
	if pr.In.TLS != nil {
		vals[2] = "https"
	}
	h["X-Forwarded-Proto"] = vals[2:3:3]
}

// upstreamProblem is the answer to a forward that failed: 504 if it timed
// out, 502 otherwise. The detail tells a client whether the upstream can
// have seen the request, which decides whether sending it again could apply
// it twice. Only the transport knows whether a byte left, so "not sent" is
// said only of the failures it marks (upstream.NotSentError); any other
// error, from any RoundTripper, may have come after part of the request was
// written.
func upstreamProblem(err error, route string) *problem {
	status := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		status = http.StatusGatewayTimeout
	}
	detail := "the upstream did not answer: the request was admitted and may or may not have reached it"
	var ns *upstream.NotSentError
	notSent := errors.As(err, &ns)
	switch {
	case errors.Is(err, errPastDeadline) && notSent:
		detail = "the request's upstream deadline (FENCE_UPSTREAM_TIMEOUT, from admission) passed before it was sent: nothing was forwarded"
	case errors.Is(err, context.DeadlineExceeded):
		detail = "the request's upstream deadline (FENCE_UPSTREAM_TIMEOUT, from admission) passed: the exchange was abandoned; " +
			"the request was admitted and may or may not have reached the upstream"
	case notSent:
		detail = "the upstream could not be reached: the request was admitted but not sent to it"
	}
	p := &problem{
		Type: "about:blank", Title: http.StatusText(status), Status: status,
		Detail: detail, Route: route,
	}
	if notSent {
		p.Forwarded = "false"
	}
	return p
}

// copyBuffers recycles the 32 KiB buffers that copy response bodies. Without
// a pool ReverseProxy allocates one per request: under load that was most of
// the bytes the proxy allocated, and so most of its garbage collection.
var copyBuffers = &bufferPool{}

// bufferPool holds each buffer by a *[]byte (a pointer goes into a
// sync.Pool without an allocation, a slice does not); the emptied *[]byte
// of a buffer taken out waits in spare for the next Put, so that recycling
// allocates nothing either way.
type bufferPool struct{ full, spare sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.full.Get().(*[]byte); ok {
		buf := *v
		*v = nil
		b.spare.Put(v)
		return buf
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) != 32<<10 {
		return
	}
	v, _ := b.spare.Get().(*[]byte)
	if v == nil {
		v = new([]byte)
	}
	*v = buf[:cap(buf)]
	b.full.Put(v)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

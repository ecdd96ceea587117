package proxy

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
)

// An admitted request in flight ends when fenceproxy's own exchange with
// the upstream ends, not when its client goes. A client that times out or
// disconnects does not cancel the exchange (its context is the request's
// upstream deadline alone, forwardAdmitted); and when the client is gone by
// the time the response comes, or a write to it fails mid-body, the response
// is still read to its end and discarded, within the upstream deadline,
// before the request is released. Otherwise the release would come while
// the upstream still works on the request (it has not even finished
// answering), and a newer request let through by it could be applied
// first.

// exchange is one admitted, in-flight request's forward. It is the
// forward's context (the upstream deadline, which the client's going does
// not cancel), and answers exchangeKey with itself: the response hook finds
// it there (forward.go). One allocation for the three, on the hot path.
type exchange struct {
	context.Context                 // the request's upstream deadline (flightDeadlines)
	client          context.Context // the client's own request context
	cut             atomic.Bool     // the response body was closed before its end
	body            readToEnd
}

type exchangeKey struct{}

// Value returns x for exchangeKey, what its deadline's context holds for
// any other key (the context package's own key, so that contexts derived
// from x attach to its deadline without a goroutine), and else what the
// client's context holds (the request's values: a deadline shared by
// several requests carries none of them).
func (x *exchange) Value(key any) any {
	if key == (exchangeKey{}) {
		return x
	}
	if v := x.Context.Value(key); v != nil {
		return v
	}
	return x.client.Value(key)
}

// exchangeOf returns the exchange r's forward belongs to, or nil when r is
// not in flight (no barrier on its route, or not fenced).
func exchangeOf(r *http.Request) *exchange {
	if r == nil {
		return nil
	}
	x, _ := r.Context().Value(exchangeKey{}).(*exchange)
	return x
}

// end counts the exchange in fenceproxy_client_gone_total when its client
// went away before it had the whole response.
func (x *exchange) end(m *routeMetrics) {
	if x.cut.Load() || x.client.Err() != nil {
		m.clientGone.Inc()
	}
}

// keepReading wraps the body of resp, the response to an in-flight request,
// so that closing it before its end reads the rest first (see above).
// ReverseProxy closes the body early only when copying it to the client
// failed; the reads stay bounded by the request's upstream deadline, which
// the transport enforces on them. A 101 is left alone: its body is the
// upgraded connection, which ReverseProxy takes over.
func (x *exchange) keepReading(resp *http.Response) {
	if resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode == http.StatusSwitchingProtocols {
		return
	}
	x.body = readToEnd{ReadCloser: resp.Body, x: x}
	resp.Body = &x.body
}

// readToEnd is an in-flight request's response body: Close reads what is
// left and discards it.
type readToEnd struct {
	io.ReadCloser
	x     *exchange
	ended bool // a read returned an error, io.EOF included: nothing is left
}

func (b *readToEnd) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.ended = true
	}
	return n, err
}

func (b *readToEnd) Close() error {
	if !b.ended {
		b.ended = true
		b.x.cut.Store(true)
		buf := copyBuffers.Get()
		_, _ = io.CopyBuffer(io.Discard, onlyReader{b.ReadCloser}, buf)
		copyBuffers.Put(buf)
	}
	return b.ReadCloser.Close()
}

// onlyReader hides a body's other methods from io.CopyBuffer, which would
// otherwise hand the copy to io.Discard's ReadFrom and its own buffers.
type onlyReader struct{ io.Reader }

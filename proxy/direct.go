package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// The direct path. httputil.ReverseProxy copies every request whole
// (Request.Clone), wraps its context in a client trace, strips the
// hop-by-hop headers from both messages and copies the response through
// a latency writer; for the request most clients send, most of that finds
// nothing to do. So a forwarder builds the upstream request of a common
// request itself, in one allocation, and relays the response by
// ReverseProxy's own rules; every other request goes to the ReverseProxy.
//
// Common means: no hop-by-hop header at all (nothing to strip, no
// upgrade, no Te: trailers to pass on) and no Expect, a query without ';'
// or a '%' that starts no escape (ReverseProxy rewrites such a query), a
// body of known length that the upstream transport writes in one go
// (within upstream.MaxInlineBody; fenceproxy has read a fenced one
// already). For such a request the two paths send the upstream the same
// request and the client the same answer: direct_test.go runs each case
// through both and compares what the upstream received and what the
// client got.

// hopHeaders are the hop-by-hop headers ReverseProxy strips (RFC 9110
// 7.6.1, and Proxy-Connection); notDirect are those and Expect: a request
// that has any of them goes to the ReverseProxy.
var (
	hopHeaders = [...]string{
		"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade",
	}
	notDirect = append(hopHeaders[:], "Expect")
)

// forwarder forwards one route's requests: the common ones itself, the
// rest through rp, with the same rewrite, response hook and error handler.
type forwarder struct {
	rp *httputil.ReverseProxy
	// info is rp's transport, taking informational answers as
	// internal/upstream's does (traceRelay adapts any other).
	info informationalTransport
	log  *zap.Logger
}

// informationalTransport is a RoundTripper that relays informational
// answers without a client trace (and so without a context per request).
type informationalTransport interface {
	RoundTripInformational(*http.Request, upstream.Informational) (*http.Response, error)
}

// informational returns tr as an informationalTransport.
func informational(tr http.RoundTripper) informationalTransport {
	if it, ok := tr.(informationalTransport); ok {
		return it
	}
	return traceRelay{tr}
}

// traceRelay relays the informational answers of another RoundTripper
// through a client trace, as ReverseProxy does.
type traceRelay struct{ http.RoundTripper }

func (t traceRelay) RoundTripInformational(r *http.Request, info upstream.Informational) (*http.Response, error) {
	trace := &httptrace.ClientTrace{Got1xxResponse: info.Informational}
	return t.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !direct(r) {
		f.rp.ServeHTTP(w, r)
		return
	}
	f.forward(w, r)
}

// direct reports whether r takes the direct path (see above).
func direct(r *http.Request) bool {
	if r.ContentLength < 0 || r.ContentLength > upstream.MaxInlineBody ||
		len(r.TransferEncoding) != 0 || r.Trailer != nil || r.Header == nil {
		return false
	}
	if !plainQuery(r.URL.RawQuery) {
		return false
	}
	for _, name := range notDirect {
		if _, ok := r.Header[name]; ok {
			return false
		}
	}
	return true
}

// plainQuery reports whether q is a query ReverseProxy sends as it is
// (httputil's cleanQueryParams): no ';' (Go no longer splits on it), every
// '%' followed by two hex digits, at most maxQueryParams parameters, and
// no urlmaxqueryparams setting in GODEBUG (with one, ReverseProxy
// re-encodes every query). A //go:debug line in a main package would set
// it too, and cannot be seen from here: fenceproxy's has none.
func plainQuery(q string) bool {
	if q != "" && queryParamsSetting {
		return false
	}
	params := 1
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			return false
		case '%':
			if i+2 >= len(q) || !isHex(q[i+1]) || !isHex(q[i+2]) {
				return false
			}
		case '&':
			if params++; params > maxQueryParams {
				return false
			}
		}
	}
	return true
}

// maxQueryParams is net/url's default bound on a query's parameters, past
// which ReverseProxy re-encodes the query (and url.ParseQuery fails).
const maxQueryParams = 10000

var queryParamsSetting = strings.Contains(os.Getenv("GODEBUG"), "urlmaxqueryparams=")

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// outgoing is the upstream request of one direct forward and what it
// needs, allocated together.
type outgoing struct {
	req  http.Request
	url  url.URL
	body noClose
	pr   httputil.ProxyRequest // for the Rewrite
	w    http.ResponseWriter   // for Informational
	// mu and done stop an informational answer that would come after the
	// final one (ReverseProxy's guard) from touching w's header map.
	mu   sync.Mutex
	done bool
}

// noClose is the request body handed to the transport, which closes the
// body it is given whatever happens: closing the client's body is
// net/http's to do (ReverseProxy wraps it for the same reason). Closed (by
// the transport, or by forward when it returns), it reads nothing more:
// http.Transport's writer may outlive the handler, and must not read the
// client's body after it (golang/go#46866, ReverseProxy's guard too).
type noClose struct {
	io.Reader
	closed atomic.Bool
}

var errBodyAfterForward = errors.New("proxy: read of a request body after its forward ended")

func (b *noClose) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errBodyAfterForward
	}
	return b.Reader.Read(p)
}

func (b *noClose) Close() error {
	b.closed.Store(true)
	return nil
}

// Informational relays a 1xx (103 Early Hints) to the client before the
// final answer, as ReverseProxy's client trace does.
func (o *outgoing) Informational(code int, header textproto.MIMEHeader) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return nil
	}
	h := o.w.Header()
	for k, vv := range header {
		h[k] = append(h[k], vv...)
	}
	o.w.WriteHeader(code)
	clear(h) // WriteHeader does not clear them after a 1xx
	return nil
}

// forward sends r, a common request, and relays the answer: ReverseProxy's
// ServeHTTP, less what a common request never needs.
func (f *forwarder) forward(w http.ResponseWriter, r *http.Request) {
	o := &outgoing{w: w}
	out := &o.req
	*out = *r // what Request.Clone copies, but the header, URL and body below
	o.url = *r.URL
	out.URL = &o.url
	out.Close = false
	out.Body = nil
	if r.ContentLength != 0 {
		o.body.Reader = r.Body
		out.Body = &o.body
		defer o.body.Close()
	}
	// The client's own forwarding headers are dropped, as ReverseProxy
	// drops them before a Rewrite; setXForwarded writes fenceproxy's.
	h := make(http.Header, len(r.Header)+4)
	for k, vv := range r.Header {
		switch k {
		case "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
			continue
		}
		h[k] = vv // shared: nothing appends to a slice of the client's in place
	}
	out.Header = h
	o.pr = httputil.ProxyRequest{In: r, Out: out}
	f.rp.Rewrite(&o.pr)
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = emptyValue // no Go-http-client default
	}

	res, err := f.info.RoundTripInformational(out, o)
	o.mu.Lock()
	o.done = true
	o.mu.Unlock()
	if err != nil {
		f.rp.ErrorHandler(w, out, err)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		// Nothing asked for an upgrade: ReverseProxy's answer.
		if f.rp.ModifyResponse != nil {
			_ = f.rp.ModifyResponse(res)
		}
		_ = res.Body.Close()
		f.rp.ErrorHandler(w, out, fmt.Errorf("backend tried to switch protocol %q when %q was requested", upgradeType(res.Header), ""))
		return
	}
	removeHopByHop(res.Header)
	if f.rp.ModifyResponse != nil {
		_ = f.rp.ModifyResponse(res) // newForwarder's never fails
	}
	wh := w.Header()
	for k, vv := range res.Header {
		if len(wh[k]) == 0 {
			wh[k] = vv // res is this forward's own: no copy needed
		} else {
			wh[k] = append(wh[k], vv...)
		}
	}
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		wh.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(res.StatusCode)
	if err := f.copyBody(w, res); err != nil {
		defer res.Body.Close()
		if r.Context().Value(http.ServerContextKey) == nil {
			// Not under net/http's server, which recovers the panic below
			// (ReverseProxy's rule too).
			return
		}
		// The answer is cut: all that is left is to abort it, so the
		// client sees a broken response and not a short one.
		panic(http.ErrAbortHandler)
	}
	_ = res.Body.Close() // now, to fill res.Trailer
	if len(res.Trailer) > 0 {
		// Chunked, so the trailers can follow (net/http would otherwise
		// send a short body with a Content-Length).
		_ = http.NewResponseController(w).Flush()
	}
	if len(res.Trailer) == announced {
		for k, vv := range res.Trailer {
			wh[k] = append(wh[k], vv...)
		}
		return
	}
	for k, vv := range res.Trailer {
		k = http.TrailerPrefix + k
		for _, v := range vv {
			wh.Add(k, v)
		}
	}
}

// emptyValue is shared by every forward's header map: nothing may write
// into it (an append copies it: it has room for one value only).
var emptyValue = []string{""}

// copyBody copies res's body to w, flushing after every write when the
// answer streams (an event stream, or no length), as ReverseProxy does.
// It returns a write error, or a read error other than EOF (logged).
func (f *forwarder) copyBody(w http.ResponseWriter, res *http.Response) error {
	var dst io.Writer = w
	if res.ContentLength == -1 || isEventStream(res.Header.Get("Content-Type")) {
		s := &streamWriter{w: w, flush: http.NewResponseController(w).Flush}
		// The headers go at once if the body is slow to come (and after
		// the first write otherwise, which lets net/http sniff a missing
		// Content-Type), as with ReverseProxy's flush timer.
		s.timer = time.AfterFunc(0, s.flushHeaders)
		defer s.stop()
		dst = s
	}
	buf := copyBuffers.Get()
	defer copyBuffers.Put(buf)
	for {
		n, rerr := res.Body.Read(buf)
		if n > 0 {
			m, werr := dst.Write(buf[:n])
			if werr != nil {
				return werr
			}
			if m != n {
				return io.ErrShortWrite
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			if rerr != context.Canceled {
				f.log.Warn("upstream response body failed", zap.Error(rerr))
			}
			return rerr
		}
	}
}

// isEventStream reports whether a Content-Type names an event stream, as
// ReverseProxy decides it (mime.ParseMediaType's type, whatever its
// parameters) without the map of parameters ParseMediaType allocates for
// every answer. The comparison can be ASCII-only: a base of 17 bytes that
// folds to the 17 ASCII runes of the type holds no multi-byte rune.
func isEventStream(ct string) bool {
	base, _, _ := strings.Cut(ct, ";")
	base = strings.TrimSpace(base)
	return len(base) == len("text/event-stream") && strings.EqualFold(base, "text/event-stream")
}

// streamWriter flushes every write to the client at once.
type streamWriter struct {
	mu    sync.Mutex // the flush timer runs on a goroutine of its own
	w     io.Writer
	flush func() error
	wrote bool // also: stopped, nothing more to flush for the headers
	timer *time.Timer
}

func (s *streamWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wrote = true
	n, err := s.w.Write(p)
	_ = s.flush()
	return n, err
}

// stop ends the flush timer: once it returns, the timer's flush has run
// or never will.
func (s *streamWriter) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wrote = true
	s.timer.Stop()
}

func (s *streamWriter) flushHeaders() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.wrote {
		_ = s.flush()
	}
}

// removeHopByHop is ReverseProxy's removal of the hop-by-hop headers of a
// response: those named in Connection, then the standard ones.
func removeHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for sf := range strings.SplitSeq(f, ",") {
			if sf = textproto.TrimString(sf); sf != "" {
				h.Del(sf)
			}
		}
	}
	for _, name := range hopHeaders {
		delete(h, name) // Del, for a name already canonical
	}
}

// upgradeType is the protocol an Upgrade header asks for, when a
// Connection header names it.
func upgradeType(h http.Header) string {
	for _, v := range h["Connection"] {
		for sf := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(sf), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}

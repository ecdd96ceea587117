package proxy

import (
	"math/rand/v2"
	"net/http"
	"unsafe"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Request ids. Every request fenceproxy handles has one: the X-Request-Id
// the client (or the proxy in front: nginx's $request_id, Envoy's
// x-request-id) sent, when it is one value of 1 to maxRequestID printable
// ASCII characters, else a new one of 16 hex digits that replaces what was
// sent. The upstream receives it, the client gets it back, and every log
// line of the request carries it as request_id.
//
// The request's header map holds the id: requestID writes a new one there
// the first time it is asked, so a log line written before the forward and
// the forward itself agree. A request that logs nothing and is forwarded
// gets its id in the forwarder (newForwarder), so an id costs the fence
// nothing: it is part of forwarding, which every forwarded request pays.

// HeaderRequestID carries the request id, to the upstream and back.
const HeaderRequestID = "X-Request-Id"

// maxRequestID bounds a request id taken from a request. A UUID is 36
// characters, nginx's $request_id 32; a longer value is replaced, so a
// client cannot put a large value on every log line.
const maxRequestID = 128

// requestID returns the request id in h, after putting a new one there if h
// has none that is valid (several values, too long, or a byte outside
// printable ASCII, such as a control character or a space).
func requestID(h http.Header) string {
	if v := h[HeaderRequestID]; len(v) == 1 && validRequestID(v[0]) {
		return v[0]
	}
	v := newRequestID()
	h[HeaderRequestID] = v
	return v[0]
}

// returnRequestID sets the request id of in (the request's headers) on w's
// answer. The value shares in's slice, which has room for one value only,
// so an Add to either copies it first.
func returnRequestID(w http.ResponseWriter, in http.Header) {
	requestID(in)
	w.Header()[HeaderRequestID] = in[HeaderRequestID][:1:1]
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// newRequestID is 64 random bits as 16 lower-case hex digits, from the
// runtime's per-thread generator (no lock), as a header value: the value's
// slice (room for one) and its bytes are one allocation, not two. Unique
// enough to find one request's lines; it is not a secret.
func newRequestID() []string {
	const digits = "0123456789abcdef"
	v := new(requestIDValue)
	x := rand.Uint64()
	for i := len(v.text) - 1; i >= 0; i-- {
		v.text[i] = digits[x&0xf]
		x >>= 4
	}
	// The string shares v's bytes, never written again; it keeps v alive.
	v.vals[0] = unsafe.String(&v.text[0], len(v.text))
	return v.vals[:1:1]
}

type requestIDValue struct {
	vals [1]string
	text [16]byte
}

// requestFields appends to fields the ones that tie a log line to its
// request: request_id, and when the request's context carries a span
// (tracing on), trace_id and span_id, the span being the request's server
// span. Called only for a line that is written.
func requestFields(r *http.Request, fields ...zap.Field) []zap.Field {
	fields = append(fields, zap.String("request_id", requestID(r.Header)))
	if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
		fields = append(fields, zap.String("trace_id", sc.TraceID().String()), zap.String("span_id", sc.SpanID().String()))
	}
	return fields
}

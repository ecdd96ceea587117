package proxy

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"net/http"
	"unsafe"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/fenceproxy/fenceproxy/internal/upstream"
)

// TraceWiring puts a server span around the data handler and a client span
// around each upstream exchange (otelhttp), but only for requests the
// sampler keeps. otelhttp builds its attributes, wraps the response writer
// and the bodies and clones the upstream request before the SDK's sampler
// is asked, so wrapping every request made an unsampled request cost twice
// what it costs untraced. Here the sampler is asked first, with the same
// parameters the SDK gives it for the server span (the parent extracted from
// the request's traceparent, the trace id the span will have); a request it
// keeps goes through otelhttp exactly as before, and one it drops takes a
// path that only does what the SDK's non-recording spans did for it:
//
//   - the request's context carries a span context in the client's trace
//     (or a new trace when the client sent none), not sampled, so that log
//     lines still name trace_id and span_id and fence.admit is not started;
//   - the upstream receives a traceparent in that trace with the sampled
//     flag 0 and a new parent id, and the client's tracestate, as the
//     SDK's propagation would have sent it (W3C Trace Context). Baggage is
//     forwarded as the client sent it, as any header.
//
// The trace id of a new trace is chosen before the sampler is asked, and
// handed to the SDK's span through the context (traceIDs), so that a ratio
// sampler decides on the id the span then carries: the prediction is the
// SDK's own decision, not a second draw.
type TraceWiring struct {
	sdk     *sdktrace.TracerProvider
	sampler sdktrace.Sampler
	prop    propagation.TextMapPropagator
}

// NewTraceWiring returns the wiring for a tracer provider made here with
// sampler and opts (its processors, resource). prop is the propagator of
// both spans (W3C trace context and baggage in serve).
func NewTraceWiring(sampler sdktrace.Sampler, prop propagation.TextMapPropagator, opts ...sdktrace.TracerProviderOption) *TraceWiring {
	opts = append(opts, sdktrace.WithSampler(sampler), sdktrace.WithIDGenerator(traceIDs{}))
	return &TraceWiring{sdk: sdktrace.NewTracerProvider(opts...), sampler: sampler, prop: prop}
}

// Provider is the tracer provider, for Options.TracerProvider and for
// anything else traced in the process.
func (w *TraceWiring) Provider() *sdktrace.TracerProvider { return w.sdk }

// Handler wraps h: a server span per sampled request, continuing the
// client's trace.
func (w *TraceWiring) Handler(h http.Handler) http.Handler {
	return &sampledHandler{w: w, plain: h,
		traced: otelhttp.NewHandler(h, "fenceproxy", otelhttp.WithTracerProvider(w.sdk), otelhttp.WithPropagators(w.prop))}
}

// Transport wraps rt: a client span per exchange of a sampled request,
// which sends its traceparent to the upstream. An exchange whose request
// has no recording span (dropped by the sampler: Handler already set its
// traceparent) goes to rt itself.
func (w *TraceWiring) Transport(rt http.RoundTripper) http.RoundTripper {
	return sampledTransport{plain: rt, traced: otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(w.sdk), otelhttp.WithPropagators(w.prop),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "upstream " + r.Method }))}
}

type sampledHandler struct {
	w      *TraceWiring
	plain  http.Handler
	traced http.Handler
}

// traceparentKey is the canonical form of W3C's traceparent header.
const traceparentKey = "Traceparent"

func (h *sampledHandler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	parent := context.Background()
	if len(r.Header[traceparentKey]) != 0 {
		// The trace context alone: baggage does not decide sampling.
		parent = propagation.TraceContext{}.Extract(parent, propagation.HeaderCarrier(r.Header))
	}
	psc := trace.SpanContextFromContext(parent)
	tid, root := psc.TraceID(), !psc.TraceID().IsValid()
	if root {
		tid = newTraceID()
	}
	res := h.w.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: parent, TraceID: tid, Name: r.Method,
		Kind: trace.SpanKindServer})
	if res.Decision != sdktrace.Drop {
		if root {
			r = r.WithContext(context.WithValue(r.Context(), traceIDKey{}, tid))
		}
		h.traced.ServeHTTP(rw, r)
		return
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(),
		TraceFlags: psc.TraceFlags() &^ trace.FlagsSampled, TraceState: res.Tracestate})
	// The upstream's traceparent, as the SDK's propagator would write it;
	// the client's tracestate, which the span context carries unchanged,
	// is forwarded as the client sent it.
	r.Header[traceparentKey] = traceparent(sc)
	h.plain.ServeHTTP(rw, r.WithContext(trace.ContextWithSpanContext(r.Context(), sc)))
}

// traceparent is sc as a W3C traceparent header value (version 00, the
// flags the propagator keeps: sampled and random), its slice and its text
// in one allocation.
func traceparent(sc trace.SpanContext) []string {
	v := new(traceparentValue)
	t := v.text[:0]
	t = append(t, "00-"...)
	tid, sid := sc.TraceID(), sc.SpanID()
	t = hex.AppendEncode(t, tid[:])
	t = append(t, '-')
	t = hex.AppendEncode(t, sid[:])
	t = append(t, '-')
	t = hex.AppendEncode(t, []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	// The string shares v's bytes, never written again; it keeps v alive.
	v.vals[0] = unsafe.String(&v.text[0], len(t))
	return v.vals[:1:1]
}

type traceparentValue struct {
	vals [1]string
	text [55]byte // 2+1+32+1+16+1+2
}

type sampledTransport struct {
	plain  http.RoundTripper
	traced http.RoundTripper
}

func (t sampledTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if trace.SpanFromContext(r.Context()).IsRecording() {
		return t.traced.RoundTrip(r)
	}
	return t.plain.RoundTrip(r)
}

// RoundTripInformational lets the direct path (direct.go) relay
// informational answers without a client trace when nothing is sampled.
func (t sampledTransport) RoundTripInformational(r *http.Request, info upstream.Informational) (*http.Response, error) {
	if trace.SpanFromContext(r.Context()).IsRecording() {
		return informational(t.traced).RoundTripInformational(r, info)
	}
	return informational(t.plain).RoundTripInformational(r, info)
}

// traceIDs is the SDK's ID generator: random ids, as the SDK's default,
// except a new trace's id when the context carries one chosen before the
// sampler was asked (traceIDKey).
type traceIDs struct{}

type traceIDKey struct{}

func (traceIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if id, ok := ctx.Value(traceIDKey{}).(trace.TraceID); ok && id.IsValid() {
		return id, newSpanID()
	}
	return newTraceID(), newSpanID()
}

func (traceIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return newSpanID() }

// newTraceID and newSpanID draw from math/rand/v2's per-thread generator,
// as random as the SDK's default and without its lock. Neither is ever all
// zeros (invalid in W3C).
func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

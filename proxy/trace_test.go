package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

// tracedFixture is a fixture wired as serve wires tracing (TraceWiring
// around the handler and the Transport, the proxy given its provider),
// with the SDK's default sampler. Its spans end up in the returned recorder.
func tracedFixture(t *testing.T, routesYAML string, store fencestore.Store, opts func(*Options)) (*fixture, *tracetest.SpanRecorder) {
	return tracedFixtureWith(t, sdktrace.ParentBased(sdktrace.AlwaysSample()), routesYAML, store, opts)
}

// tracedFixtureWith is tracedFixture with sampler.
func tracedFixtureWith(t *testing.T, sampler sdktrace.Sampler, routesYAML string, store fencestore.Store,
	opts func(*Options)) (*fixture, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	wire := NewTraceWiring(sampler, propagation.TraceContext{}, sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = wire.Provider().Shutdown(context.Background()) })
	f := &fixture{t: t, up: newUpstream(t), store: store, metrics: NewMetrics()}
	f.upstream, _ = url.Parse(f.up.URL)
	o := Options{Upstream: f.upstream, Routes: mustRoutes(t, routesYAML), Store: store, Metrics: f.metrics,
		TracerProvider: wire.Provider(), Transport: wire.Transport(NewTransport())}
	if opts != nil {
		opts(&o)
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	f.front = httptest.NewServer(wire.Handler(p))
	t.Cleanup(f.front.Close)
	return f, rec
}

// admitSpans returns the ended fence.admit spans by token.
func admitSpans(rec *tracetest.SpanRecorder) map[string]sdktrace.ReadOnlySpan {
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if s.Name() == admitSpanName {
			out[attrOf(s, attrToken)] = s
		}
	}
	return out
}

// The barrier's wait is part of the admission: 42, held back behind 41 in
// flight, has a fence.admit that says it waited and how long, and that
// ends before its upstream exchange begins; 41, which waited for nothing,
// says none.
func TestAdmitSpanCoversTheBarrier(t *testing.T) {
	f, rec := tracedFixture(t, drainRoutes, memstore.New(), nil)
	h := holdingUpstream(f)
	held := f.send("/docs/1", "41", true)
	h.arrives(t, "41", 5*time.Second)
	newer := f.send("/docs/1", "42", false)
	h.nothingArrives(t, 200*time.Millisecond, "42 while 41 is in flight")
	releasedAt := time.Now()
	close(h.release)
	answer(t, held, http.StatusOK)
	answer(t, newer, http.StatusOK)
	h.arrives(t, "42", 5*time.Second)

	spans := admitSpans(rec)
	s41, s42 := spans["41"], spans["42"]
	if s41 == nil || s42 == nil {
		t.Fatalf("admission spans by token: %v", spans)
	}
	if got := attrOf(s41, attrDrain); got != "none" {
		t.Errorf("41: fence.drain %q, want none", got)
	}
	if got := attrOf(s41, attrDrainWaitMS); got != "" {
		t.Errorf("41 waited for nothing, yet fence.drain_wait_ms = %s", got)
	}
	if got := attrOf(s42, attrDrain); got != "waited" {
		t.Errorf("42: fence.drain %q, want waited", got)
	}
	// The span ends once 41 is released, not at the admission: it covers
	// the wait, which it reports.
	waited, _ := strconv.ParseFloat(attrOf(s42, attrDrainWaitMS), 64)
	lasted := s42.EndTime().Sub(s42.StartTime())
	if s42.EndTime().Before(releasedAt) || waited <= 0 || time.Duration(waited*float64(time.Millisecond)) > lasted {
		t.Errorf("42's fence.admit ended %v after 41 was released, reports a wait of %.1f ms and lasts %v",
			s42.EndTime().Sub(releasedAt), waited, lasted)
	}
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindClient && s.Parent().SpanID() == s42.Parent().SpanID() && s.StartTime().Before(s42.EndTime()) {
			t.Error("42's upstream exchange began before its admission span ended")
		}
	}
}

// attrOf is s's attribute k as a string, "" when s lacks it.
func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.Emit()
		}
	}
	return ""
}

// A store that fails: fence.admit says unavailable and is an error; a
// refusal before the store (no token) has no fence.admit, and its server
// span names the decision.
func TestAdmitSpanRefusals(t *testing.T) {
	f, rec := tracedFixture(t, ordersRoutes, failingStore{err: fencestore.Unavailable(errors.New("down"))}, nil)
	if resp, _ := f.do("PUT", "/orders/1", "Fencing-Token", "5"); resp.StatusCode != 503 {
		t.Fatalf("store down: %d", resp.StatusCode)
	}
	s := admitSpans(rec)["5"]
	if s == nil || attrOf(s, attrDecision) != "unavailable" || s.Status().Code != codes.Error {
		t.Fatalf("store down: fence.admit %v", s)
	}
	rec.Reset()
	if resp, _ := f.do("PUT", "/orders/1"); resp.StatusCode != 428 {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
	for _, s := range rec.Ended() {
		switch {
		case s.Name() == admitSpanName:
			t.Error("a fence.admit for a request that never reached the store")
		case s.SpanKind() == trace.SpanKindServer && attrOf(s, attrDecision) != "missing":
			t.Errorf("server span's fence.decision %q, want missing", attrOf(s, attrDecision))
		}
	}
}

// Tracing off (no TracerProvider): even when the request's context carries
// a recording span (traced by someone else), the proxy starts no span and
// adds no attribute to it.
func TestTracingOffStartsNoSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	up, _ := url.Parse("http://127.0.0.1:1")
	p, err := New(Options{Upstream: up, Routes: config.DefaultRoutes(), Store: memstore.New(), Transport: cannedTransport{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "outer")
	r := httptest.NewRequestWithContext(ctx, "PUT", "/x", nil)
	r.Header.Set("Fencing-Token", "1")
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	parent.End()
	if w.Code != 200 {
		t.Fatalf("status %d", w.Code)
	}
	spans := rec.Ended()
	if len(spans) != 1 || len(spans[0].Attributes()) != 0 {
		t.Fatalf("tracing off: %d spans, the outer one with attributes %v", len(spans), spans[0].Attributes())
	}
}

// With tracing on, every log line of a request has trace_id and span_id,
// those of its server span (the client's trace).
func TestLogLinesCarryTheTrace(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	f, rec := tracedFixture(t, ordersRoutes, memstore.New(), func(o *Options) { o.Logger = zap.New(core) })
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	parent := "00-" + traceID + "-00f067aa0ba902b7-01"
	f.do("PUT", "/orders/1", "Fencing-Token", "5", "Traceparent", parent)
	f.do("PUT", "/orders/1", "Fencing-Token", "4", "Traceparent", parent)
	servers := map[string]bool{}
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindServer {
			servers[s.SpanContext().SpanID().String()] = true
		}
	}
	for _, msg := range []string{"admitted", "refused"} {
		lines := logs.FilterMessage(msg).All()
		if len(lines) != 1 {
			t.Fatalf("%d %q lines", len(lines), msg)
		}
		m := lines[0].ContextMap()
		if m["trace_id"] != traceID || !servers[m["span_id"].(string)] || m["request_id"] == "" {
			t.Errorf("%s line: trace_id %v span_id %v request_id %v; want the client's trace, a server span %v",
				msg, m["trace_id"], m["span_id"], m["request_id"], servers)
		}
	}
}

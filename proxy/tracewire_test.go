package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

// traceHeaders makes f's upstream record the trace headers it receives.
func traceHeaders(f *fixture) func() []http.Header {
	var mu sync.Mutex
	var seen []http.Header
	f.up.handle(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, http.Header{"Traceparent": r.Header.Values("Traceparent"), "Tracestate": r.Header.Values("Tracestate"),
			"Baggage": r.Header.Values("Baggage")})
		mu.Unlock()
	})
	return func() []http.Header {
		mu.Lock()
		defer mu.Unlock()
		return append([]http.Header(nil), seen...)
	}
}

// A request the sampler drops is not traced by otelhttp, yet what leaves
// fenceproxy is what the SDK's non-recording spans sent: the upstream gets
// a traceparent in the client's trace (or a new one), with a new parent
// id and the sampled flag 0, the client's tracestate and baggage; the log
// lines name that trace. A request the sampler keeps has its three spans
// and the upstream span's traceparent, as before.
func TestTraceWiringSampling(t *testing.T) {
	const (
		clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		clientSpan  = "00f067aa0ba902b7"
	)
	tests := []struct {
		name    string
		sampler sdktrace.Sampler
		parent  string // the client's traceparent; "" none
		sampled bool
	}{
		{"always_off, no parent", sdktrace.NeverSample(), "", false},
		{"always_off, sampled parent", sdktrace.NeverSample(), "00-" + clientTrace + "-" + clientSpan + "-01", false},
		{"parent-based, unsampled parent", sdktrace.ParentBased(sdktrace.AlwaysSample()), "00-" + clientTrace + "-" + clientSpan + "-00", false},
		{"parent-based off, no parent", sdktrace.ParentBased(sdktrace.NeverSample()), "", false},
		{"parent-based, invalid parent (a new trace)", sdktrace.ParentBased(sdktrace.NeverSample()), "00-" + clientTrace + "-" + clientSpan, false},
		{"parent-based, sampled parent", sdktrace.ParentBased(sdktrace.AlwaysSample()), "00-" + clientTrace + "-" + clientSpan + "-01", true},
		{"parent-based, no parent", sdktrace.ParentBased(sdktrace.AlwaysSample()), "", true},
		{"always_on, unsampled parent", sdktrace.AlwaysSample(), "00-" + clientTrace + "-" + clientSpan + "-00", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			f, rec := tracedFixtureWith(t, tc.sampler, ordersRoutes, memstore.New(), func(o *Options) { o.Logger = zap.New(core) })
			seen := traceHeaders(f)
			headers := []string{"Fencing-Token", "5", "Tracestate", "vendor=1", "Baggage", "user=7"}
			if tc.parent != "" {
				headers = append(headers, "Traceparent", tc.parent)
			}
			if resp, body := f.do("PUT", "/orders/1", headers...); resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			got := seen()
			if len(got) != 1 {
				t.Fatalf("%d upstream requests", len(got))
			}
			tp := strings.Split(got[0].Get("Traceparent"), "-")
			if len(tp) != 4 || tp[0] != "00" || len(tp[1]) != 32 || len(tp[2]) != 16 || tp[1] == strings.Repeat("0", 32) {
				t.Fatalf("upstream traceparent %q", got[0].Get("Traceparent"))
			}
			validParent := strings.Count(tc.parent, "-") == 3
			if validParent && tp[1] != clientTrace {
				t.Errorf("upstream trace %s, want the client's %s", tp[1], clientTrace)
			}
			if !validParent && tp[1] == clientTrace {
				t.Errorf("upstream trace %s: an invalid traceparent continued", tp[1])
			}
			if tp[2] == clientSpan {
				t.Error("upstream parent id is the client's span: fenceproxy's own span is skipped")
			}
			if got[0].Get("Baggage") != "user=7" || (validParent && got[0].Get("Tracestate") != "vendor=1") {
				t.Errorf("upstream tracestate %q, baggage %q; want the client's", got[0].Get("Tracestate"), got[0].Get("Baggage"))
			}
			spans := rec.Ended()
			if !tc.sampled {
				if tp[3] != "00" || len(spans) != 0 {
					t.Fatalf("dropped: upstream flags %s, %d spans recorded", tp[3], len(spans))
				}
			} else {
				var upstream trace.SpanContext
				names := map[string]bool{}
				for _, s := range spans {
					names[s.Name()] = true
					if s.SpanKind() == trace.SpanKindClient {
						upstream = s.SpanContext()
					}
				}
				if tp[3] != "01" || len(spans) != 3 || !names[admitSpanName] || tp[2] != upstream.SpanID().String() {
					t.Fatalf("sampled: upstream traceparent %q, spans %v", got[0].Get("Traceparent"), names)
				}
			}
			lines := logs.FilterMessage("admitted").All()
			if len(lines) != 1 || lines[0].ContextMap()["trace_id"] != tp[1] {
				t.Errorf("admitted log lines %v, want one with trace_id %s", lines, tp[1])
			}
		})
	}
}

// evenTraces samples a trace whose id's first byte is even: like a ratio
// sampler it decides on the trace id alone, but what it decides is known.
type evenTraces struct{}

func (evenTraces) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	d := sdktrace.Drop
	if p.TraceID[0]%2 == 0 {
		d = sdktrace.RecordAndSample
	}
	return sdktrace.SamplingResult{Decision: d, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
}

func (evenTraces) Description() string { return "even trace ids" }

// A new trace's decision, taken before otelhttp runs, is the SDK's own: the
// span gets the trace id the sampler was asked about, so a sampler that
// decides by trace id (traceidratio) keeps exactly the traces it said it
// would, never one it dropped, never dropping one it kept (with a second
// draw of the id, about half of the 64 requests would disagree).
func TestTraceWiringNewTraceDecidedOnce(t *testing.T) {
	f, rec := tracedFixtureWith(t, evenTraces{}, ordersRoutes, memstore.New(), nil)
	seen := traceHeaders(f)
	const n = 64
	for i := range n {
		if resp, body := f.do("PUT", "/orders/1", "Fencing-Token", strconv.Itoa(i+1)); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	servers := map[string]bool{}
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindServer {
			servers[s.SpanContext().TraceID().String()] = true
		}
	}
	kept := 0
	for _, h := range seen() {
		tp := strings.Split(h.Get("Traceparent"), "-")
		if len(tp) != 4 || len(tp[1]) != 32 {
			t.Errorf("upstream traceparent %q", h.Get("Traceparent"))
			continue
		}
		even := strings.IndexByte("02468ace", tp[1][1]) >= 0
		if sampled := tp[3] == "01"; sampled != even || servers[tp[1]] != even {
			t.Errorf("trace %s: upstream flags %s, server span recorded %v; the sampler decides %v", tp[1], tp[3], servers[tp[1]], even)
		}
		if even {
			kept++
		}
	}
	if kept == 0 || kept == n {
		t.Fatalf("%d of %d traces kept: the test decides nothing", kept, n)
	}
}

// What tracing costs a request the sampler drops, in allocations beyond
// the same request untraced: a new trace (always_off) and a client's
// unsampled parent (the default parent-based sampler). Its span context in
// the request's context (two) and the request copy that carries it, the
// traceparent sent on (one), and for a parent, its extraction (a span
// context in a context for the sampler, and its own copy). otelhttp around
// every request cost 54 more.
const (
	unsampledRootAllocs   = 4
	unsampledParentAllocs = 8
)

func TestUnsampledTracingAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items on purpose under -race; run without -race (make test runs both)")
	}
	tests := []struct {
		name    string
		sampler sdktrace.Sampler
		parent  string
		budget  float64
	}{
		{"always_off", sdktrace.NeverSample(), "", unsampledRootAllocs},
		{"unsampled parent", sdktrace.ParentBased(sdktrace.AlwaysSample()), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
			unsampledParentAllocs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up, _ := url.Parse("http://127.0.0.1:1")
			newProxy := func(tp trace.TracerProvider, rt http.RoundTripper) *Proxy {
				p, err := New(Options{Upstream: up, Routes: mustRoutes(t, ordersRoutes), Store: memstore.New(), Transport: rt,
					MarkCache: 1000, TracerProvider: tp})
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			w := NewTraceWiring(tc.sampler, propagation.TraceContext{})
			t.Cleanup(func() { _ = w.Provider().Shutdown(context.Background()) })
			traced := w.Handler(newProxy(w.Provider(), w.Transport(cannedTransport{})))
			plain := newProxy(nil, cannedTransport{})
			token := 1 << 40
			run := func(h http.Handler) func() {
				return func() {
					token++
					r := httptest.NewRequest("PUT", "/orders/1", nil)
					r.Header["Fencing-Token"] = []string{strconv.Itoa(token)}
					if tc.parent != "" {
						r.Header["Traceparent"] = []string{tc.parent}
					}
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, r)
					if rec.Code != 200 {
						t.Fatalf("status %d: %s", rec.Code, rec.Body)
					}
				}
			}
			run(traced)()
			run(plain)()
			base := testing.AllocsPerRun(1000, run(plain))
			got := testing.AllocsPerRun(1000, run(traced))
			if got > base+tc.budget {
				t.Fatalf("an unsampled request allocates %.0f times, untraced %.0f: tracing adds %.0f, above %.0f",
					got, base, got-base, tc.budget)
			}
			t.Logf("untraced %.0f, unsampled %.0f", base, got)
		})
	}
}

// traceparent writes what the SDK's propagator writes for the same span
// context.
func TestTraceparentAsThePropagator(t *testing.T) {
	tid, sid := newTraceID(), newSpanID()
	for _, flags := range []trace.TraceFlags{0, trace.FlagsSampled, trace.FlagsRandom, trace.FlagsSampled | trace.FlagsRandom, 0xff} {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags})
		h := http.Header{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.HeaderCarrier(h))
		if got := traceparent(sc); len(got) != 1 || got[0] != h.Get("Traceparent") {
			t.Errorf("flags %02x: %q, the propagator writes %q", byte(flags), got, h.Get("Traceparent"))
		}
	}
}

package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// BenchmarkFeature is one admitted request through the handler as serve
// ships it (the drain barrier on, the mark cache of FENCE_MARK_CACHE's
// default, metrics, a request id made here, tracing off; the memory store
// and a canned upstream, as BenchmarkServeHTTP), then the same with one
// feature switched off, or on, at a time: the difference of two cases is
// what that feature costs a request in fenceproxy's own process. Reported,
// never asserted. Time per op is the machine's; allocations, and
// instructions counted under valgrind (docs/performance.md, "Where the CPU
// goes, per feature"), are not:
//
//	go test -run '^$' -bench BenchmarkFeature -benchmem ./proxy
//	go test -c -o /tmp/proxy.test ./proxy && valgrind --tool=callgrind \
//	  /tmp/proxy.test -test.run '^$' -test.bench 'BenchmarkFeature/shipped$' -test.benchtime 20000x
func BenchmarkFeature(b *testing.B) {
	for _, c := range featureCases() {
		b.Run(c.name, func(b *testing.B) { runFeature(b, c.tw) })
	}
}

// BenchmarkFeatureRatio reports fenceproxy's time per admitted request
// over httputil.ReverseProxy's (BenchmarkFeature's shipped and
// plain-reverseproxy, in alternating runs of 100 requests, each timed on
// its own; the collector's work falls on whichever allocates when it
// starts). Reported, never asserted: the machine's load moves it.
//
//	go test -run '^$' -bench BenchmarkFeatureRatio -benchtime 20000x ./proxy
func BenchmarkFeatureRatio(b *testing.B) {
	var serve [2]func(int)
	for _, c := range featureCases() {
		switch c.name {
		case "shipped":
			serve[0] = setupFeature(b, c.tw)
		case "plain-reverseproxy":
			serve[1] = setupFeature(b, c.tw)
		}
	}
	var spent [2]time.Duration
	i := 1000
	for b.Loop() {
		i++
		k := (i / 100) % 2
		start := time.Now()
		serve[k](i)
		spent[k] += time.Since(start)
	}
	if spent[1] > 0 {
		b.ReportMetric(float64(spent[0])/float64(spent[1]), "fenceproxy/plain")
	}
}

// tweak is what a case of BenchmarkFeature changes.
type tweak struct {
	opts func(*Options)
	p    func(*Proxy)
	// req changes the request before it is served (a header, the body).
	req func(*http.Request)
	// wrap is around the proxy (tracing's server wiring).
	wrap func(b *testing.B, o *Options) func(http.Handler) http.Handler
	// body is the request's body; "" none.
	body string
	// signed sends signed tokens (one per resource, repeating) instead
	// of a new decimal token per request; cache is the verifier's size
	// (0 its default, negative none).
	signed bool
	cache  int
	// want is the status; 0: 200. A 409 case first raises every mark.
	want int
}

// featureCases are BenchmarkFeature's cases, the shipped one first.
func featureCases() []featureCase {
	const bodyBytes = "0123456789abcdefghi\n" // the load benchmark's 20 bytes
	return []featureCase{
		{"shipped", tweak{}},
		// The barrier's registration and release (in the memory store;
		// the Redis commands: BenchmarkAdmissionCommands).
		{"no-drain", tweak{opts: func(o *Options) { o.NoDrain = true }}},
		{"no-markcache", tweak{opts: func(o *Options) { o.MarkCache = 0 }}},
		// Every collector of the request's path replaced by one that does
		// nothing (the calls stay, the atomics and bucket searches go).
		{"no-metrics", tweak{p: silenceMetrics}},
		// The client sends an id: checked and passed on, none made.
		{"client-request-id", tweak{req: func(r *http.Request) { r.Header[HeaderRequestID] = []string{"0123456789abcdef"} }}},
		// Tracing wired as serve wires it, the sampler dropping every
		// request (OTEL_TRACES_SAMPLER=always_off).
		{"tracing-unsampled", tweak{wrap: unsampledTracing(sdktrace.NeverSample())}},
		// ... and the client's traceparent not sampled, the sampler
		// parent-based (OTEL_TRACES_SAMPLER unset).
		{"tracing-unsampled-parent", tweak{wrap: unsampledTracing(sdktrace.ParentBased(sdktrace.AlwaysSample())),
			req: func(r *http.Request) {
				r.Header["Traceparent"] = []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}
			}}},
		// otelhttp around every request, sampled or not, as serve wired
		// tracing before TraceWiring: what asking the sampler first saves.
		{"tracing-unsampled-otelhttp", tweak{wrap: otelhttpEveryRequest}},
		// A 20-byte body of known length, read whole before admission
		// (readBodyFirst) ...
		{"body", tweak{body: bodyBytes}},
		// ... and the same bytes of unknown length, streamed (not read
		// first): body minus body-streamed is what reading first costs.
		{"body-streamed", tweak{body: bodyBytes, req: func(r *http.Request) { r.ContentLength = -1 }}},
		// Signed tokens (EdDSA), one per resource, repeating: with the
		// verifier's cache (every request a hit) and without.
		{"signed-cached", tweak{signed: true}},
		{"signed-uncached", tweak{signed: true, cache: -1}},
		// A refusal (stale), which the status page records (recent.go).
		{"stale", tweak{want: http.StatusConflict}},
		// Not fenceproxy: the benchmark's own work per request (request,
		// recorder), answered by a handler that does nothing, to subtract
		// from every case; and httputil.ReverseProxy alone with the same
		// canned upstream (bench/cmd/goplain's forwarding, in process).
		{"harness-only", tweak{wrap: func(*testing.B, *Options) func(http.Handler) http.Handler {
			return func(http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})
			}
		}}},
		{"plain-reverseproxy", tweak{wrap: func(_ *testing.B, o *Options) func(http.Handler) http.Handler {
			rp := &httputil.ReverseProxy{Transport: o.Transport, Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(o.Upstream) // as bench/cmd/goplain
			}}
			return func(http.Handler) http.Handler { return rp }
		}}},
	}
}

type featureCase struct {
	name string
	tw   tweak
}

// runFeature is one case of BenchmarkFeature.
func runFeature(b *testing.B, tw tweak) {
	serve := setupFeature(b, tw)
	b.ReportAllocs()
	i := 1000
	for b.Loop() {
		i++
		serve(i)
	}
}

// setupFeature builds the handler of a case with every resource seen once
// and returns what serves its i-th request.
func setupFeature(b *testing.B, tw tweak) func(i int) {
	up, _ := url.Parse("http://127.0.0.1:1")
	o := Options{Upstream: up, Routes: mustRoutes(b, ordersRoutes), Store: memstore.New(), Transport: cannedTransport{},
		MarkCache: 100_000}
	var toks []string
	if tw.signed {
		o.Tokens, toks = signedTokens(b, tw.cache)
	}
	if tw.opts != nil {
		tw.opts(&o)
	}
	var wrap func(http.Handler) http.Handler
	if tw.wrap != nil {
		wrap = tw.wrap(b, &o)
	}
	p, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	if tw.p != nil {
		tw.p(p)
	}
	var h http.Handler = p
	if wrap != nil {
		h = wrap(p)
	}
	want := cmpOr(tw.want, http.StatusOK)
	token := func(i int) string { return strconv.Itoa(1_000_000 + i) }
	switch {
	case tw.signed:
		token = func(i int) string { return toks[i%1000] }
	case want == http.StatusConflict:
		token = func(int) string { return "1" }
	}
	do := func(i int, tok string, want int) {
		var rb io.Reader
		if tw.body != "" {
			rb = strings.NewReader(tw.body)
		}
		r := httptest.NewRequest("PUT", "/orders/"+strconv.Itoa(i%1000), rb)
		r.Header.Set("Fencing-Token", tok)
		if tw.req != nil {
			tw.req(r)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			b.Fatalf("status %d, want %d: %s", w.Code, want, w.Body)
		}
	}
	// Every resource seen once before the loop (its mark set, its
	// name interned, its signed token verified and cached), so the
	// loop measures the steady state; for stale, each mark above
	// every token of the loop.
	for i := range 1000 {
		tok := token(i)
		if want == http.StatusConflict {
			tok = "1000000"
		}
		do(i, tok, http.StatusOK)
	}
	return func(i int) { do(i, token(i), want) }
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// signedTokens returns a verifier (its cache of cacheSize, as
// fencejwt.NewVerifier takes it) and one EdDSA token per resource
// orders/<i>, i < 1000, each with the fence 1,000,000.
func signedTokens(b *testing.B, cacheSize int) (*fencejwt.Verifier, []string) {
	priv, set, err := fencejwt.NewKey(fencejwt.KindEdDSA, "bench")
	if err != nil {
		b.Fatal(err)
	}
	signer, err := fencejwt.ParseSigningKey(priv)
	if err != nil {
		b.Fatal(err)
	}
	keys, err := fencejwt.ParseKeySet(set)
	if err != nil {
		b.Fatal(err)
	}
	toks := make([]string, 1000)
	for i := range toks {
		toks[i], err = signer.Sign(fencejwt.Claims{Fence: 1_000_000, Resource: "orders/" + strconv.Itoa(i), Expiry: time.Now().Add(time.Hour)})
		if err != nil {
			b.Fatal(err)
		}
	}
	return fencejwt.NewVerifier(keys, 5*time.Second, cacheSize), toks
}

// unsampledTracing wires tracing as serve does (TraceWiring around the
// handler and the transport, the proxy given its provider), with sampler.
func unsampledTracing(sampler sdktrace.Sampler) func(b *testing.B, o *Options) func(http.Handler) http.Handler {
	return func(b *testing.B, o *Options) func(http.Handler) http.Handler {
		w := NewTraceWiring(sampler, propagation.TraceContext{},
			sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter())))
		b.Cleanup(func() { _ = w.Provider().Shutdown(context.Background()) })
		o.TracerProvider = w.Provider()
		o.Transport = w.Transport(o.Transport)
		return w.Handler
	}
}

// otelhttpEveryRequest is otelhttp around the handler and the transport of
// every request, with a sampler that drops them all.
func otelhttpEveryRequest(b *testing.B, o *Options) func(http.Handler) http.Handler {
	prop := propagation.TraceContext{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()),
		sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter())))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	o.TracerProvider = tp
	o.Transport = otelhttp.NewTransport(o.Transport, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(prop))
	return func(h http.Handler) http.Handler {
		return otelhttp.NewHandler(h, "fenceproxy", otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(prop))
	}
}

// silenceMetrics replaces every collector a request touches (the in-flight
// gauge, each route's counters and histograms) with one that does nothing.
// The routes' collectors are overwritten in place: the forwarders hold
// pointers to them.
func silenceMetrics(p *Proxy) {
	p.metrics.inFlight = noGauge{}
	var c noCounter
	var o noObserver
	for _, r := range p.table.Load().all() {
		m := r.metrics
		for i := range m.requests {
			m.requests[i] = c
		}
		for i := range m.upstreamClass {
			m.upstreamClass[i] = c
		}
		for i := range m.drain {
			m.drain[i] = c
		}
		m.upstreamErrors, m.regressions, m.clientGone = c, c, c
		m.admitted, m.stale, m.unavailable, m.upstreamTime, m.drainWait = o, o, o, o, o
	}
}

type noCounter struct{ prometheus.Counter }

func (noCounter) Inc()        {}
func (noCounter) Add(float64) {}

type noGauge struct{ prometheus.Gauge }

func (noGauge) Inc() {}
func (noGauge) Dec() {}

type noObserver struct{}

func (noObserver) Observe(float64) {}

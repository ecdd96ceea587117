package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

// BenchmarkTracing is one admitted request through the handler, wired as
// serve wires tracing (otelhttp around the handler and the Transport, the
// proxy given the provider): off (no wiring at all: what every request
// pays with OTEL_TRACES_EXPORTER unset), unsampled (the wiring, sampler
// always_off) and sampled (three spans per request, each handed to a
// processor that drops it, so the exporter's own cost is not counted).
func BenchmarkTracing(b *testing.B) {
	up, _ := url.Parse("http://127.0.0.1:1")
	prop := propagation.TraceContext{}
	for _, mode := range []string{"off", "unsampled", "sampled"} {
		b.Run(mode, func(b *testing.B) {
			o := Options{Upstream: up, Routes: mustRoutes(b, ordersRoutes), Store: memstore.New(), Transport: cannedTransport{}}
			var h http.Handler
			if mode != "off" {
				sampler := sdktrace.AlwaysSample()
				if mode == "unsampled" {
					sampler = sdktrace.NeverSample()
				}
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler),
					sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(tracetest.NewNoopExporter())))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				o.TracerProvider = tp
				o.Transport = otelhttp.NewTransport(cannedTransport{}, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(prop))
				p, err := New(o)
				if err != nil {
					b.Fatal(err)
				}
				h = otelhttp.NewHandler(p, "fenceproxy", otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(prop))
			} else {
				p, err := New(o)
				if err != nil {
					b.Fatal(err)
				}
				h = p
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				r := httptest.NewRequest("PUT", "/orders/"+strconv.Itoa(i%1000), nil)
				r.Header.Set("Fencing-Token", strconv.Itoa(1_000_000+i))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != 200 {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}

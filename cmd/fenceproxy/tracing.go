package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fenceproxy/fenceproxy/proxy"
)

// Tracing (OpenTelemetry), configured only by the standard OTEL_* variables
// of the process environment, as the SDK reads them:
//
//   - OTEL_TRACES_EXPORTER: otlp, console or none, through contrib's
//     autoexport (which also reads OTEL_EXPORTER_OTLP_*). Unset or none:
//     tracing is off, and nothing else OTEL_* is read. (autoexport itself
//     would choose otlp when it is unset.) OTEL_SDK_DISABLED=true also
//     turns it off.
//   - OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG: read by the SDK;
//     checked here first, so that a misspelt sampler stops the start rather
//     than being logged and replaced by the default (parentbased_always_on).
//   - OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: the resource, over
//     service.name=fenceproxy and service.version.
//
// On: a server span per request (otelhttp around the data handler; the
// client's W3C traceparent is continued), the proxy's fence.admit span, and
// a client span per upstream exchange (otelhttp around the Transport),
// whose traceparent the upstream receives; in the authorization mode's
// gRPC listener, otelgrpc's server span (from the call's metadata). The
// global propagator is W3C trace context and baggage.
//
// Off: the handler and the Transport are not wrapped and the proxy has no
// tracer, so a request costs nothing more than without this file; a
// client's traceparent passes to the upstream untouched, as any header.

// tracingFlushTimeout bounds the flush of the spans still buffered at
// shutdown, after the drain: a collector that does not answer loses them
// rather than holding the pod past its grace period.
const tracingFlushTimeout = 3 * time.Second

// tracing is serve's tracing wiring; its zero value (and a nil *tracing)
// is tracing off.
type tracing struct {
	sdk  *sdktrace.TracerProvider // nil: off
	wire *proxy.TraceWiring       // the data path's spans, for sampled requests only
	prop propagation.TextMapPropagator
	log  *zap.Logger
}

// exporters are the values of OTEL_TRACES_EXPORTER that fenceproxy knows:
// autoexport's.
var exporters = []string{"otlp", "console", "none"}

// samplers are the values of OTEL_TRACES_SAMPLER the Go SDK knows.
var samplers = []string{"always_on", "always_off", "traceidratio",
	"parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

// startTracing sets tracing up from the process environment. test, when
// not nil, is the exporter (spans exported as each ends), whatever the
// environment says; serve's hooks pass it in tests.
func startTracing(ctx context.Context, log *zap.Logger, test sdktrace.SpanExporter) (*tracing, error) {
	t := &tracing{log: log}
	name := "test"
	if test == nil {
		var err error
		if name, err = tracesExporter(); err != nil || name == "none" {
			return t, err
		}
	}
	sampler, err := samplerFromEnv()
	if err != nil {
		return nil, err
	}
	exp := test
	if exp == nil {
		if exp, err = autoexport.NewSpanExporter(ctx); err != nil {
			return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: %w", name, err)
		}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "fenceproxy"), attribute.String("service.version", buildVersion())),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w", err)
	}
	var process sdktrace.TracerProviderOption
	if test != nil {
		process = sdktrace.WithSyncer(exp)
	} else {
		process = sdktrace.WithBatcher(exp) // WithBatcher starts its goroutine at once
	}
	t.prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	t.wire = proxy.NewTraceWiring(sampler, t.prop, process, sdktrace.WithResource(res))
	t.sdk = t.wire.Provider()
	otel.SetTextMapPropagator(t.prop)
	otel.SetTracerProvider(t.sdk)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", zap.Error(err)) }))
	log.Info("tracing on", zap.String("exporter", os.Getenv("OTEL_TRACES_EXPORTER")),
		zap.String("sampler", os.Getenv("OTEL_TRACES_SAMPLER")))
	return t, nil
}

// tracesExporter is OTEL_TRACES_EXPORTER's exporter: none when tracing is
// off, an error naming the variable for a value autoexport does not know.
func tracesExporter() (string, error) {
	if v, _ := strconv.ParseBool(os.Getenv("OTEL_SDK_DISABLED")); v {
		return "none", nil
	}
	name := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	switch {
	case name == "":
		return "none", nil
	case !slices.Contains(exporters, name):
		return "", fmt.Errorf("OTEL_TRACES_EXPORTER: unknown exporter %q (one of %s; unset means none)",
			name, strings.Join(exporters, ", "))
	}
	return name, nil
}

// samplerFromEnv is the sampler OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG name, read as the SDK reads them (unset:
// parentbased_always_on; a ratio's argument unset: 1). It is made here, not
// by the SDK, because the data path asks it before otelhttp runs
// (proxy.TraceWiring). A sampler the SDK does not know, or an argument that
// is not a ratio, is an error naming the variable (the SDK would only log
// it and fall back to the default).
func samplerFromEnv() (sdktrace.Sampler, error) {
	var errs []error
	s := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")))
	if s != "" && !slices.Contains(samplers, s) {
		errs = append(errs, fmt.Errorf("OTEL_TRACES_SAMPLER: unknown sampler %q (one of %s)", s, strings.Join(samplers, ", ")))
	}
	ratio := 1.0
	if arg := strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER_ARG")); arg != "" && strings.HasSuffix(s, "traceidratio") {
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || f < 0 || f > 1 {
			errs = append(errs, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: %q is not a ratio from 0 to 1", arg))
		}
		ratio = f
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	switch s {
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	default: // "" and parentbased_always_on
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	}
}

// on reports whether tracing is on.
func (t *tracing) on() bool { return t != nil && t.sdk != nil }

// provider is the tracer provider for proxy.Options; nil (an untyped nil)
// when off.
func (t *tracing) provider() trace.TracerProvider {
	if !t.on() {
		return nil
	}
	return t.sdk
}

// handler wraps the data handler in a server span per sampled request,
// continuing the client's trace; off, h itself. An unsampled request costs
// a sampler's decision and its traceparent (proxy.TraceWiring).
func (t *tracing) handler(h http.Handler) http.Handler {
	if !t.on() {
		return h
	}
	return t.wire.Handler(h)
}

// transport wraps the upstream transport in a client span per exchange of
// a sampled request, which sends its traceparent to the upstream; off, rt
// itself.
func (t *tracing) transport(rt http.RoundTripper) http.RoundTripper {
	if !t.on() {
		return rt
	}
	return t.wire.Transport(rt)
}

// grpcOptions give the gRPC server (Envoy's ext_authz) a server span per
// Check, continuing the trace in the call's metadata; health checks are
// not traced. Off: none.
func (t *tracing) grpcOptions() []grpc.ServerOption {
	if !t.on() {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.sdk), otelgrpc.WithPropagators(t.prop),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck()))))}
}

// shutdown flushes the spans still buffered, for at most
// tracingFlushTimeout, and stops the exporter.
func (t *tracing) shutdown() {
	if !t.on() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
	defer cancel()
	if err := t.sdk.Shutdown(ctx); err != nil {
		t.log.Warn("tracing: flushing the last spans at shutdown", zap.Error(err))
	}
}

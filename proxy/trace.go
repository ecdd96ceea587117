package proxy

import (
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (OpenTelemetry). The request's server span and the span of its
// upstream exchange belong to the wiring (TraceWiring: otelhttp around the
// handler and the transport for the requests the sampler keeps); the proxy
// adds one span of its own,
// fence.admit, a child of the server span: from the store's
// compare-and-advance to the end of the wait at the drain barrier. It also
// names the route and the decision on the server span.
//
// With no TracerProvider (tracing off) nothing here runs: no span is
// started, no attribute built, no context looked up. A request whose server
// span is not recording (the sampler dropped it) starts no fence.admit
// either: every sampler the SDK knows decides a child of a sampled span as
// it decided the span (same trace id, or its parent's flag), so asking
// again could only cost.

// admitSpanName is the name of the admission's span.
const admitSpanName = "fence.admit"

// Attributes of fence.admit (route and decision also on the server span).
// Token, sequence and mark are decimal strings, as in the logs: a 64-bit
// attribute is signed.
const (
	attrRoute       = attribute.Key("fence.route")
	attrResource    = attribute.Key("fence.resource")
	attrToken       = attribute.Key("fence.token")
	attrSequence    = attribute.Key("fence.sequence")
	attrDecision    = attribute.Key("fence.decision")
	attrMark        = attribute.Key("fence.mark")
	attrDrain       = attribute.Key("fence.drain")         // the barrier's outcome: none, waited, expired, timeout
	attrDrainWaitMS = attribute.Key("fence.drain_wait_ms") // set when the request waited at the barrier
)

// tracerName is the instrumentation scope of fence.admit.
const tracerName = "github.com/fenceproxy/fenceproxy/proxy"

// startAdmit starts r's admission span for resource and token, or returns
// nil when tracing is off or the request is not sampled.
func (p *Proxy) startAdmit(r *http.Request, rt *route, resource string, token, seq uint64, hasSeq bool) trace.Span {
	if p.tracer == nil || !trace.SpanFromContext(r.Context()).IsRecording() {
		return nil
	}
	_, span := p.tracer.Start(r.Context(), admitSpanName)
	if !span.IsRecording() {
		return nil
	}
	span.SetAttributes(attrRoute.String(rt.name), attrResource.String(resource), attrToken.String(formatUint(token)))
	if hasSeq {
		span.SetAttributes(attrSequence.String(formatUint(seq)))
	}
	return span
}

// endAdmit ends v's admission span, if it has one, with what the store
// said: the decision and the mark (the request's own token when admitted,
// the mark that refused it when stale).
func (v *verdict) endAdmit() {
	span := v.span
	if span == nil {
		return
	}
	v.span = nil
	span.SetAttributes(attrDecision.String(v.dec.String()))
	mark := ""
	switch {
	case v.pr == nil:
		mark = formatUint(v.d.Mark)
	default:
		mark = v.pr.HighWaterMark
	}
	if mark != "" {
		span.SetAttributes(attrMark.String(mark))
	}
	if v.dec == decUnavailable {
		span.SetStatus(codes.Error, v.pr.Title)
	}
	span.End()
}

// traceDrain records on span (nil: nothing) how the request passed the
// barrier, and how long it waited there when it did.
func traceDrain(span trace.Span, o drainOutcome, waited time.Duration, didWait bool) {
	if span == nil {
		return
	}
	span.SetAttributes(attrDrain.String(drainOutcomeNames[o]))
	if didWait {
		span.SetAttributes(attrDrainWaitMS.Float64(float64(waited) / float64(time.Millisecond)))
	}
}

// traceVerdict ends v's admission span, unless it is still to wait at the
// barrier (keep), and names the route and the decision (its would_ twin on a
// dry-run route) on r's server span.
func (p *Proxy) traceVerdict(r *http.Request, v *verdict, keep bool) {
	if p.tracer == nil {
		return
	}
	if !keep {
		v.endAdmit()
	}
	span := trace.SpanFromContext(r.Context())
	if !span.IsRecording() {
		return
	}
	d := v.dec
	if v.pr != nil && p.dryRun(v) {
		d = d.would()
	}
	span.SetAttributes(attrRoute.String(v.rt.name), attrDecision.String(d.String()))
}

package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/internal/fencejwt"
)

// Options configure a Proxy. Upstream, Routes and Store are required.
type Options struct {
	Upstream *url.URL      // base URL of the protected service
	Routes   config.Routes // the validated route table
	Store    fencestore.Store
	// TokenHeader is the request header carrying the token. If empty,
	// "Fencing-Token".
	TokenHeader string
	// SequenceHeader is the request header carrying the sequence, read on a
	// route whose sequence is not off. If empty, "Fencing-Sequence".
	SequenceHeader string
	// StoreTimeout bounds one admission; past it the request gets 503.
	// If zero, 500ms.
	StoreTimeout time.Duration
	// Logger receives one line per refusal (info) and per admission (debug).
	// If nil, nothing is logged.
	Logger *zap.Logger
	// Metrics receives the request counters. If nil, a private set is used.
	Metrics *Metrics
	// Transport forwards admitted requests. If nil, NewTransport().
	Transport http.RoundTripper
	// BodyTimeout bounds reading one request body from the client, from the
	// moment the handler starts, less the time the request waits at the
	// drain barrier; past it the read fails and nothing more of the body
	// reaches the upstream. If zero, 60s.
	BodyTimeout time.Duration
	// UpstreamTimeout bounds every admitted request from its admission to
	// the end of its response (FENCE_UPSTREAM_TIMEOUT); past it the upstream
	// exchange is abandoned. It is also the bound the request is registered
	// in the drain barrier with: nothing of it is sent past it. If zero, 30s.
	UpstreamTimeout time.Duration
	// Tokens verifies signed tokens (FENCE_TOKEN_KEYS_FILE): when set, the
	// token header must hold a JWS of its keys, and the token is its fence
	// claim. Nil: the header holds the token as a decimal.
	Tokens *fencejwt.Verifier
	// MethodOverrideHeaders are request headers read as the request's
	// method besides DefaultMethodOverrideHeaders
	// (FENCE_METHOD_OVERRIDE_HEADERS): a request carrying one is routed and
	// fenced as the method it names.
	MethodOverrideHeaders []string
	// NoDrain turns the drain barrier off for every route (FENCE_DRAIN=off).
	NoDrain bool
	// MarkCache is how many resources' marks the replica remembers to heal
	// a store that lost them (FENCE_MARK_CACHE); zero or less: none.
	MarkCache int
	// DrainTimeout bounds one wait at the barrier (FENCE_DRAIN_TIMEOUT);
	// past it the request gets 503 drain-timeout. Zero: wait until the older
	// requests end or reach their deadlines.
	DrainTimeout time.Duration
	// TracerProvider gives the tracer of the admission's span (fence.admit,
	// a child of the recording span in the request's context: a request
	// without one, sampled out or not wrapped, gets no admission span),
	// and turns on the fence.route and fence.decision attributes of the
	// request's own span. If nil, tracing is off: no span and no
	// per-request cost. The server span and the upstream exchange's span
	// are the wiring's (TraceWiring: otelhttp around the handler and the
	// Transport, for the requests its sampler keeps).
	TracerProvider trace.TracerProvider
}

// Proxy is the fencing reverse proxy, an http.Handler.
type Proxy struct {
	// table is the route table in force: SetRoutes replaces it whole,
	// between requests (each request loads it once).
	table          atomic.Pointer[router]
	upstream       *url.URL          // nil in authorization mode: nothing is forwarded
	transport      http.RoundTripper // forwards admitted requests
	metrics        *Metrics
	noDrain        bool
	store          fencestore.Store
	tokenHeader    string
	sequenceHeader string
	tokens         *fencejwt.Verifier // nil: plain tokens
	// overrideHeaders are the headers read as the request's method
	// (edges.go), in canonical form.
	overrideHeaders []string
	storeTimeout    time.Duration
	bodyTimeout     time.Duration
	// upstreamTimeout and drainTimeout: see Options.
	upstreamTimeout time.Duration
	drainTimeout    time.Duration
	deadlines       *sharedDeadline
	flights         *flightDeadlines // the upstream deadlines of requests in flight
	// marks is the mark cache (markcache.go); nil when off.
	marks *markCache
	// tracer starts fence.admit; nil when tracing is off (trace.go).
	tracer trace.Tracer
	log    *zap.Logger
	// outageLog logs the refusals of a store that does not answer through
	// zap's sampler: during an outage every fenced request is refused, and
	// one line each would flood the log (and its disk) with the same news.
	outageLog *zap.Logger
}

// Sampling of outageLog: per second, the first outageLogFirst refusals with
// the same message and level, then every outageLogThereafter-th.
const (
	outageLogFirst      = 10
	outageLogThereafter = 100
)

// New builds a Proxy. It fails only on a route table chi refuses.
func New(o Options) (*Proxy, error) {
	if o.Upstream == nil {
		return nil, errors.New("proxy: Upstream is required")
	}
	return newProxy(o)
}

// newProxy builds a Proxy; without o.Upstream it decides and never
// forwards (authorization mode).
func newProxy(o Options) (*Proxy, error) {
	if o.Store == nil {
		return nil, errors.New("proxy: Store is required")
	}
	if o.TokenHeader == "" {
		o.TokenHeader = "Fencing-Token"
	}
	if o.SequenceHeader == "" {
		o.SequenceHeader = "Fencing-Sequence"
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = 500 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.Transport == nil && o.Upstream != nil {
		o.Transport = NewTransport()
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 60 * time.Second
	}
	if o.UpstreamTimeout <= 0 {
		o.UpstreamTimeout = 30 * time.Second
	}
	th := http.CanonicalHeaderKey(o.TokenHeader)
	sh := http.CanonicalHeaderKey(o.SequenceHeader)
	if th == sh {
		return nil, errors.New("proxy: TokenHeader and SequenceHeader are the same header")
	}
	p := &Proxy{
		upstream:        o.Upstream,
		transport:       o.Transport,
		metrics:         o.Metrics,
		noDrain:         o.NoDrain || o.Upstream == nil,
		store:           o.Store,
		tokenHeader:     th,
		tokens:          o.Tokens,
		sequenceHeader:  sh,
		storeTimeout:    o.StoreTimeout,
		bodyTimeout:     o.BodyTimeout,
		upstreamTimeout: o.UpstreamTimeout,
		drainTimeout:    o.DrainTimeout,
		overrideHeaders: overrideHeaders(o.MethodOverrideHeaders),
		marks:           newMarkCache(o.MarkCache),
		deadlines:       newSharedDeadline(o.StoreTimeout),
		flights:         newFlightDeadlines(o.UpstreamTimeout),
		log:             o.Logger,
		outageLog: o.Logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
			return zapcore.NewSamplerWithOptions(c, time.Second, outageLogFirst, outageLogThereafter)
		})),
	}
	if o.TracerProvider != nil {
		p.tracer = o.TracerProvider.Tracer(tracerName)
	}
	if err := p.SetRoutes(o.Routes); err != nil {
		return nil, err
	}
	return p, nil
}

// SetRoutes puts a new route table in force: requests that started before
// finish under the old one, every later request sees the new one, none sees
// a mix. It fails, and the old table stays, only on a table chi refuses
// (config.ReadRoutes has already validated the rest).
func (p *Proxy) SetRoutes(rs config.Routes) error {
	rt, err := newRouter(rs, p.tokenHeader, p.sequenceHeader, p.metrics)
	if err != nil {
		return err
	}
	for _, r := range rt.all() {
		// One ReverseProxy per route (they share the Transport): its error
		// handler then counts upstream failures for its route without a
		// per-request context value.
		if p.upstream != nil {
			r.forward = newForwarder(p.upstream, p.transport, p.log.With(zap.String("route", r.name)), r.metrics, r.name)
		}
		r.drain = r.drain && !p.noDrain
	}
	p.table.Store(rt)
	p.metrics.setModes(rt)
	return nil
}

// ServeHTTP fences r and forwards it, or answers with a problem. decide
// runs the steps in the order of docs/internals.md (canonical path, route,
// token and sequence, resource, admission); what is left here is the
// outcome: forward, refuse, or, on a dry-run route, count the refusal and
// forward anyway.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.metrics.inFlight.Inc()
	defer p.metrics.inFlight.Dec()
	bodyBy := p.boundBody(w, r)
	var vv verdict
	v := p.decide(&vv, p.table.Load(), r, false)
	admitted := v.pr == nil && v.dec == decAdmitted
	p.traceVerdict(r, v, admitted) // an admitted request's span ends after the barrier
	switch {
	case admitted:
		v.rt.metrics.requests[decAdmitted].Inc()
		p.forwardAdmitted(w, r, v, bodyBy)
	case v.pr == nil:
		v.rt.metrics.requests[v.dec].Inc()
		p.serveForward(w, r, v.rt, v.canon, v.trailing)
	case p.dryRun(v):
		p.countRefusal(v, r)
		p.serveForward(w, r, v.rt, v.canon, v.trailing)
	default:
		p.countRefusal(v, r)
		p.writeRefusal(w, r, v.pr)
	}
}

// dryRun reports whether v's refusal is only counted, on a route with
// enforce: false: every refusal but one with nothing whole to forward.
func (p *Proxy) dryRun(v *verdict) bool {
	return v.rt.dryRun && !answers[v.pr.ref].always
}

// countRefusal counts and logs v's refusal of r (info: refusals are what an
// operator looks for; a store outage's through the sampled log), as its
// would_ twin on a dry-run route.
func (p *Proxy) countRefusal(v *verdict, r *http.Request) {
	d := v.dec
	msg := "refused"
	if p.dryRun(v) {
		d, msg = d.would(), "would refuse (dry run: forwarded)"
	}
	v.rt.metrics.requests[d].Inc()
	p.metrics.record(v.rt, d, v.pr)
	log := p.log
	if v.dec == decUnavailable {
		log = p.outageLog
	}
	p.logRefusal(log, msg, r, v.rt, d, v.pr, v.extra...)
}

// writeRefusal answers a refusal of r, with its request id. A token that
// does not verify is a failed authentication (RFC 9110 says a 401 names its
// scheme).
func (p *Proxy) writeRefusal(w http.ResponseWriter, r *http.Request, pr *problem) {
	returnRequestID(w, r.Header)
	if pr.ref == refTokenInvalid {
		w.Header().Set("WWW-Authenticate", `Fencing-Token header="`+p.tokenHeader+`"`)
	}
	writeProblem(w, pr)
}

// logRefusal writes one refusal's log line (of r) to log.
func (p *Proxy) logRefusal(log *zap.Logger, msg string, r *http.Request, rt *route, d decision, pr *problem, extra ...zap.Field) {
	if ce := log.Check(zapcore.InfoLevel, msg); ce != nil {
		// Room for every field, requestFields' three included: one allocation.
		fields := make([]zap.Field, 0, 12+len(extra))
		fields = append(fields,
			zap.String("route", rt.name), zap.String("decision", d.String()), zap.Int("status", pr.Status),
			zap.String("resource", pr.Resource), zap.String("token", pr.Token), zap.String("mark", pr.HighWaterMark),
			zap.String("detail", pr.Detail))
		fields = append(fields, extra...)
		// Known only on a route with a sequence: strings, as token and mark.
		if pr.Sequence != "" {
			fields = append(fields, zap.String("sequence", pr.Sequence))
		}
		if pr.HighWaterSequence != "" {
			fields = append(fields, zap.String("highWaterSequence", pr.HighWaterSequence))
		}
		ce.Write(requestFields(r, fields...)...)
	}
}

// unavailableDetail says why the store could not admit, in words safe to
// show to a client: never the store's address or its own error text.
func (p *Proxy) unavailableDetail(err error) string {
	const rest = "; nothing was forwarded"
	var unsafe *fencestore.UnsafeError
	switch {
	case errors.Is(err, fencestore.ErrStoreLost):
		var lost *fencestore.LostError
		if errors.As(err, &lost) && lost.Rollback {
			return "the fence store went back in time: its generation is below one this replica saw (restored from a backup, " +
				"or a replica that missed writes took over), so its marks may be older than tokens already superseded" + rest +
				"; an operator must raise the marks and run fenceproxy store init --force"
		}
		return "the fence store is lost: its identity record is gone, changed or marked lost since this replica read it (the store " +
			"was emptied, restarted without persistence, replaced, or went back in time), so its marks may be gone" + rest +
			"; an operator must raise the marks and run fenceproxy store init --force"
	case errors.As(err, &unsafe):
		return "the fence store is refused as unsafe: " + unsafe.Reason + rest
	case errors.Is(err, context.DeadlineExceeded):
		return "the fence store did not answer within " + p.storeTimeout.String() + rest +
			" (the store may still record the token)"
	}
	return "the fence store failed to answer (the proxy's log says why)" + rest +
		" (the store may still have recorded the token)"
}

// fencedOnceUpperCased reports whether method is not in upper case but would
// be fenced on path if it were. Methods are case-sensitive on the wire, yet
// Django, Werkzeug and others upper-case them: "put /doc" would reach the
// upstream as a PUT that nothing fenced. Only a request that is not fenced
// as sent pays for the check.
func (p *Proxy) fencedOnceUpperCased(tab *router, method, path string) bool {
	upper := true
	for i := 0; i < len(method); i++ {
		if 'a' <= method[i] && method[i] <= 'z' {
			upper = false
			break
		}
	}
	if upper {
		return false
	}
	up := strings.ToUpper(method)
	rt, rctx := tab.match(up, path)
	tab.release(rctx)
	return rt.fences(up)
}

// nonCanonicalUint returns the name of a {name:uint} parameter of rt whose
// value is not a canonical unsigned integer, or "". Frameworks parse "07",
// "+7" and " 7" as 7, so each would name order 7 under a mark of its own.
func nonCanonicalUint(rt *route, rctx *chi.Context) string {
	for _, name := range rt.uints {
		v, _ := urlParam(rctx, name)
		if _, ok := fencestore.ParseMark(v); !ok {
			return name
		}
	}
	return ""
}

// boundBody bounds the time reading r's body may take (Options.BodyTimeout),
// so that a client that stops sending cannot hold a goroutine and an upstream
// connection for ever. The bound is the connection's read deadline; net/http
// clears it once the body has been read (its background read of the idle
// connection starts then), so it never cuts a slow response short. It
// returns the deadline (zero: none), which the barrier stops while the
// request waits there (drain.go).
func (p *Proxy) boundBody(w http.ResponseWriter, r *http.Request) time.Time {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return time.Time{}
	}
	// An error means w is not a connection of net/http's server (a test
	// recorder, say): nothing to bound.
	by := time.Now().Add(p.bodyTimeout)
	if http.NewResponseController(w).SetReadDeadline(by) != nil {
		return time.Time{}
	}
	return by
}

// errTokenHopByHop refuses a request whose Connection header names the token
// header: that makes the token hop-by-hop, so it would be fenced here and
// stripped on the way to the upstream. The token is then malformed for this
// hop (golang/go#50580 is the same trap for a Director).
var errTokenHopByHop = &TokenError{Reason: "the Connection header names the token header, which would strip it before the upstream"}

// connectionError refuses a Connection header naming a header of the resource
// template, for the same reason: the upstream would not see what named the
// resource.
type connectionError struct{ header string }

func (e *connectionError) Error() string {
	return "the Connection header names " + e.header +
		", which names the resource; as a hop-by-hop header it would not reach the upstream"
}

// checkConnection checks the Connection header against the headers the fence
// depends on (the token header first, then the sequence header on a route
// with a sequence, then the template's headers).
func (p *Proxy) checkConnection(r *http.Request, rt *route) error {
	for _, v := range r.Header["Connection"] {
		for v != "" {
			var name string
			name, v, _ = strings.Cut(v, ",")
			name = strings.TrimSpace(name)
			for i, h := range rt.connHeaders {
				if strings.EqualFold(name, h) {
					switch {
					case i == 0:
						return errTokenHopByHop
					case i == 1 && rt.sequence != config.SequenceOff:
						return errSequenceHopByHop
					}
					return &connectionError{header: h}
				}
			}
		}
	}
	return nil
}

// serveForward hands r to the reverse proxy with the canonical path, so the
// upstream serves exactly the path that was fenced (a trailing slash kept as
// sent).
func (p *Proxy) serveForward(w http.ResponseWriter, r *http.Request, rt *route, canon string, trailing bool) {
	if trailing && canon != "/" {
		canon += "/"
	}
	if r.URL.Path != canon || r.URL.RawPath != "" {
		r.URL.Path, r.URL.RawPath = canon, ""
	}
	start := time.Now()
	rt.forward.ServeHTTP(w, r)
	rt.metrics.upstreamTime.Observe(time.Since(start).Seconds())
}

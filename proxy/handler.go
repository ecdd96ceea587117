package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
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
	// moment the handler starts; past it the read fails and nothing more of
	// the body reaches the upstream. If zero, 60s.
	BodyTimeout time.Duration
	// UpstreamTimeout bounds every admitted request from its admission to
	// the end of its response (FENCE_UPSTREAM_TIMEOUT); past it the upstream
	// exchange is abandoned. It is also the in-flight deadline of the drain
	// barrier. If zero, 30s.
	UpstreamTimeout time.Duration
	// Tokens verifies signed tokens (FENCE_TOKEN_KEYS_FILE): when set, the
	// token header must hold a JWS of its keys, and the token is its fence
	// claim. Nil: the header holds the token as a decimal.
	Tokens *fencejwt.Verifier
	// NoDrain turns the drain barrier off for every route (FENCE_DRAIN=off).
	NoDrain bool
	// MarkCache is how many resources' marks the replica remembers to heal
	// a store that lost them (FENCE_MARK_CACHE); zero or less: none.
	MarkCache int
	// DrainTimeout bounds one wait at the barrier (FENCE_DRAIN_TIMEOUT);
	// past it the request gets 503 drain-timeout. Zero: wait until the older
	// requests end or reach their deadlines.
	DrainTimeout time.Duration
}

// Proxy is the fencing reverse proxy, an http.Handler.
type Proxy struct {
	router         *router
	store          fencestore.Store
	tokenHeader    string
	sequenceHeader string
	tokens         *fencejwt.Verifier // nil: plain tokens
	storeTimeout   time.Duration
	bodyTimeout    time.Duration
	// upstreamTimeout and drainTimeout: see Options.
	upstreamTimeout time.Duration
	drainTimeout    time.Duration
	deadlines       *sharedDeadline
	// marks is the mark cache (markcache.go); nil when off.
	marks *markCache
	log   *zap.Logger
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
	if o.Upstream == nil || o.Store == nil {
		return nil, errors.New("proxy: Upstream and Store are required")
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
	if o.Transport == nil {
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
	rt, err := newRouter(o.Routes, th, sh, o.Metrics)
	if err != nil {
		return nil, err
	}
	// One ReverseProxy per route (they share the Transport): its error
	// handler then counts upstream failures for its route without a
	// per-request context value.
	for _, r := range rt.all() {
		r.forward = newForwarder(o.Upstream, o.Transport, o.Logger.With(zap.String("route", r.name)), r.metrics, r.name)
		r.drain = r.drain && !o.NoDrain
	}
	p := &Proxy{
		router:          rt,
		store:           o.Store,
		tokenHeader:     th,
		tokens:          o.Tokens,
		sequenceHeader:  sh,
		storeTimeout:    o.StoreTimeout,
		bodyTimeout:     o.BodyTimeout,
		upstreamTimeout: o.UpstreamTimeout,
		drainTimeout:    o.DrainTimeout,
		marks:           newMarkCache(o.MarkCache),
		deadlines:       newSharedDeadline(o.StoreTimeout),
		log:             o.Logger,
		outageLog: o.Logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
			return zapcore.NewSamplerWithOptions(c, time.Second, outageLogFirst, outageLogThereafter)
		})),
	}
	return p, nil
}

// ServeHTTP fences r and forwards it, or answers with a problem. The steps
// run in the order of the house plan: canonical path, route, token (and
// sequence, on a route with one), resource, admission, forward.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	canon, trailing, err := CanonicalPath(r.URL.EscapedPath())
	if err != nil {
		p.refuse(w, p.router.fallback, decBadRequest, &problem{
			Type: TypeBadRequest, Title: "Ambiguous path", Status: http.StatusBadRequest,
			Detail: err.Error(),
		}, zap.String("path", r.URL.EscapedPath()))
		return
	}
	p.boundBody(w, r)
	rt, rctx := p.router.match(r.Method, canon)
	defer p.router.release(rctx)
	m := rt.metrics

	if !rt.fences(r.Method) {
		if p.fencedOnceUpperCased(r.Method, canon) {
			p.refuse(w, rt, decBadRequest, &problem{
				Type: TypeBadRequest, Title: "Method not in upper case", Status: http.StatusBadRequest,
				Detail: "the method is not in upper case, and in upper case it is fenced on this path " +
					"(many frameworks upper-case it): send it in upper case with a fencing token",
				Route: rt.name,
			})
			return
		}
		m.requests[decUnfenced].Inc()
		p.serveForward(w, r, rt, canon, trailing)
		return
	}
	if name := nonCanonicalUint(rt, rctx); name != "" {
		p.refuse(w, rt, decBadRequest, &problem{
			Type: TypeBadRequest, Title: "Ambiguous number in path", Status: http.StatusBadRequest,
			Detail: "path parameter {" + name + "} must be a canonical unsigned integer " +
				"(digits only, no sign, no leading zero): another spelling of the same number would escape its mark",
			Route: rt.name,
		})
		return
	}

	token, signed, err := p.tokenOf(r.Header[p.tokenHeader])
	var seq uint64
	var hasSeq bool
	if err == nil && rt.sequence != config.SequenceOff {
		seq, hasSeq, err = p.sequenceOf(r, rt)
	}
	if err == nil {
		err = p.checkConnection(r, rt)
	}
	if err != nil {
		var te *TokenError
		var se *SequenceError
		var ie *fencejwt.Error
		switch {
		case errors.Is(err, ErrTokenAbsent) && rt.tokenOptional:
			m.requests[decUnfenced].Inc()
			p.serveForward(w, r, rt, canon, trailing)
		case errors.Is(err, ErrTokenAbsent):
			p.refuse(w, rt, decMissing, &problem{
				Type: TypeTokenRequired, Title: "Fencing token required", Status: http.StatusPreconditionRequired,
				Detail: "this route is fenced: send the lease's token in the " + p.tokenHeader + " header",
				Route:  rt.name,
			})
		case errors.As(err, &ie):
			w.Header().Set("WWW-Authenticate", `Fencing-Token header="`+p.tokenHeader+`"`)
			p.refuse(w, rt, decInvalid, &problem{
				Type: TypeTokenInvalid, Title: "Invalid fencing token", Status: http.StatusUnauthorized,
				Detail: p.tokenHeader + ": " + err.Error(), Route: rt.name,
			})
		case errors.As(err, &te):
			p.refuse(w, rt, decMalformed, &problem{
				Type: TypeTokenMalformed, Title: "Malformed fencing token", Status: http.StatusBadRequest,
				Detail: p.tokenHeader + ": " + err.Error(), Route: rt.name,
			})
		case errors.Is(err, ErrSequenceAbsent):
			p.refuse(w, rt, decMissing, &problem{
				Type: TypeSequenceRequired, Title: "Fencing sequence required", Status: http.StatusPreconditionRequired,
				Detail: "this route orders the requests of one lease: send the request's sequence in the " + p.sequenceHeader + " header",
				Route:  rt.name, Token: formatUint(token),
			})
		case errors.As(err, &se):
			p.refuse(w, rt, decMalformed, &problem{
				Type: TypeSequenceMalformed, Title: "Malformed fencing sequence", Status: http.StatusBadRequest,
				Detail: p.sequenceHeader + ": " + err.Error(), Route: rt.name, Token: formatUint(token),
			})
		default: // the Connection header names a template header
			p.refuse(w, rt, decBadRequest, &problem{
				Type: TypeBadRequest, Title: "Bad request", Status: http.StatusBadRequest,
				Detail: err.Error(), Route: rt.name,
			})
		}
		return
	}

	var query url.Values
	if needsQuery(&rt.resource) {
		if query, err = url.ParseQuery(r.URL.RawQuery); err != nil {
			p.refuse(w, rt, decBadRequest, &problem{
				Type: TypeBadRequest, Title: "Bad request", Status: http.StatusBadRequest,
				Detail: "the query string is malformed and names the resource: " + err.Error(), Route: rt.name,
			})
			return
		}
	}
	var nameBuf [128]byte
	name, err := fillResource(nameBuf[:0], &rt.resource, r, rctx, query)
	if err != nil {
		p.refuse(w, rt, decBadRequest, &problem{
			Type: TypeBadRequest, Title: "Resource cannot be named", Status: http.StatusBadRequest,
			Detail: err.Error(), Route: rt.name, Token: formatUint(token), Sequence: formatIf(seq, hasSeq),
		})
		return
	}
	// Only admitted names are kept: a client that invents names (refused,
	// or never admitted) must not grow the cache.
	resource, interned := rt.names.lookup(name)
	if p.tokens != nil && !signed.Covers(resource) {
		p.refuse(w, rt, decWrongResource, &problem{
			Type: TypeTokenWrongResource, Title: "Fencing token for another resource", Status: http.StatusForbidden,
			Detail: "the signed token is valid for " + strconv.Quote(signed.Resource) + " only (its res claim)",
			Route:  rt.name, Resource: resource, Token: formatUint(token),
		})
		return
	}

	if err := readBodyFirst(r); err != nil {
		status := http.StatusBadRequest
		if err == errBodyTimeout {
			status = http.StatusRequestTimeout
		}
		p.refuse(w, rt, decBadRequest, &problem{
			Type: TypeBadRequest, Title: "Request body incomplete", Status: status,
			Detail: err.Error() + "; it was not admitted and nothing was forwarded",
			Route:  rt.name, Resource: resource, Token: formatUint(token), Sequence: formatIf(seq, hasSeq),
		})
		return
	}

	a := fencestore.Admission{Resource: resource, Token: token, Sequence: seq, HasSequence: hasSeq, Compare: rt.compare}
	if rt.drain {
		a.Flight = p.upstreamTimeout
	}
	if p.marks != nil {
		a.Floor, a.HasFloor = p.marks.get(resource)
	}
	start := time.Now()
	d, err := p.store.Admit(p.deadlines.context(start), a)
	elapsed := time.Since(start)
	if err == nil && p.marks != nil {
		p.marks.see(resource, fencestore.Mark{Token: d.Mark, Sequence: d.Sequence, HasSequence: d.HasSequence})
		if d.Regressed {
			m.regressions.Inc()
			p.log.Warn("the store's mark was below the one this replica saw: raised back to it (lost in a crash, a flush or a failover)",
				zap.String("route", rt.name), zap.String("resource", resource),
				zap.String("remembered", string(a.Floor.AppendValue(nil))), zap.String("token", formatUint(token)))
		}
	}

	switch {
	case err != nil:
		m.unavailable.Observe(elapsed.Seconds())
		m.requests[decUnavailable].Inc()
		pr := &problem{
			Type: TypeStoreUnavailable, Title: "Fence store unavailable", Status: http.StatusServiceUnavailable,
			Detail: p.unavailableDetail(err),
			Route:  rt.name, Resource: resource, Token: formatUint(token), Sequence: formatIf(seq, hasSeq),
		}
		if errors.Is(err, fencestore.ErrStoreLost) {
			pr.Type, pr.Title = TypeStoreLost, "Fence store lost its marks"
		}
		p.logRefusal(p.outageLog, rt, decUnavailable, pr, zap.Error(err))
		writeProblem(w, pr)
	case !d.Admitted:
		m.stale.Observe(elapsed.Seconds())
		pr := &problem{
			Type: TypeStaleToken, Title: "Stale fencing token", Status: http.StatusConflict,
			Detail: "token " + formatUint(token) + " is older than the resource's high-water mark " +
				formatUint(d.Mark) + ": a newer lease holder has written",
			Route: rt.name, Resource: resource, Token: formatUint(token), HighWaterMark: formatUint(d.Mark),
			Sequence: formatIf(seq, hasSeq), HighWaterSequence: formatIf(d.Sequence, d.HasSequence),
		}
		if d.StaleSequence(a) {
			pr.Type, pr.Title = TypeStaleSequence, "Stale fencing sequence"
			pr.Detail = "sequence " + pr.Sequence + " of token " + pr.Token + " is not above the resource's high-water sequence " +
				pr.HighWaterSequence + " for that token: a later request of this lease was admitted first, or this one was already admitted"
		}
		p.refuse(w, rt, decStale, pr)
	default:
		m.admitted.Observe(elapsed.Seconds())
		m.requests[decAdmitted].Inc()
		if !interned {
			rt.names.add(resource)
		}
		if ce := p.log.Check(zapcore.DebugLevel, "admitted"); ce != nil {
			// token and mark are strings in every log line, as in the
			// problem bodies: JSON numbers lose precision past 2^53.
			fields := []zap.Field{zap.String("route", rt.name), zap.String("resource", resource),
				zap.String("token", formatUint(token)), zap.String("mark", formatUint(d.Mark)), zap.Duration("duration", elapsed)}
			if hasSeq {
				fields = append(fields, zap.String("sequence", formatUint(seq)), zap.String("highWaterSequence", formatUint(d.Sequence)))
			}
			ce.Write(fields...)
		}
		p.forwardAdmitted(w, r, rt, canon, trailing, start, a, d)
	}
}

// refuse counts, logs (info: refusals are what an operator looks for) and
// answers a problem. The upstream receives nothing.
func (p *Proxy) refuse(w http.ResponseWriter, rt *route, d decision, pr *problem, extra ...zap.Field) {
	rt.metrics.requests[d].Inc()
	p.logRefusal(p.log, rt, d, pr, extra...)
	writeProblem(w, pr)
}

// logRefusal writes one refusal's log line to log.
func (p *Proxy) logRefusal(log *zap.Logger, rt *route, d decision, pr *problem, extra ...zap.Field) {
	if ce := log.Check(zapcore.InfoLevel, "refused"); ce != nil {
		fields := append([]zap.Field{
			zap.String("route", rt.name), zap.String("decision", d.String()), zap.Int("status", pr.Status),
			zap.String("resource", pr.Resource), zap.String("token", pr.Token), zap.String("mark", pr.HighWaterMark),
			zap.String("detail", pr.Detail),
		}, extra...)
		// Known only on a route with a sequence: strings, as token and mark.
		if pr.Sequence != "" {
			fields = append(fields, zap.String("sequence", pr.Sequence))
		}
		if pr.HighWaterSequence != "" {
			fields = append(fields, zap.String("highWaterSequence", pr.HighWaterSequence))
		}
		ce.Write(fields...)
	}
}

// unavailableDetail says why the store could not admit, in words safe to
// show to a client: never the store's address or its own error text.
func (p *Proxy) unavailableDetail(err error) string {
	const rest = "; nothing was forwarded"
	var unsafe *fencestore.UnsafeError
	switch {
	case errors.Is(err, fencestore.ErrStoreLost):
		return "the fence store's identity record is gone or changed since this replica read it (the store was emptied, " +
			"restarted without persistence, or replaced), so its marks may be gone" + rest +
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
func (p *Proxy) fencedOnceUpperCased(method, path string) bool {
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
	rt, rctx := p.router.match(up, path)
	p.router.release(rctx)
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
// connection starts then), so it never cuts a slow response short.
func (p *Proxy) boundBody(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return
	}
	// An error means w is not a connection of net/http's server (a test
	// recorder, say): nothing to bound.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(p.bodyTimeout))
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
	rt.forward.ServeHTTP(w, r)
}

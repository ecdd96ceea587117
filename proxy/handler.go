package proxy

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
)

// Options configure a Proxy. Upstream, Routes and Store are required.
type Options struct {
	Upstream *url.URL      // base URL of the protected service
	Routes   config.Routes // the validated route table
	Store    fencestore.Store
	// TokenHeader is the request header carrying the token. If empty,
	// "Fencing-Token".
	TokenHeader string
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
}

// Proxy is the fencing reverse proxy, an http.Handler.
type Proxy struct {
	router       *router
	store        fencestore.Store
	tokenHeader  string
	storeTimeout time.Duration
	deadlines    sharedDeadline
	log          *zap.Logger
}

// New builds a Proxy. It fails only on a route table chi refuses.
func New(o Options) (*Proxy, error) {
	if o.Upstream == nil || o.Store == nil {
		return nil, errors.New("proxy: Upstream and Store are required")
	}
	if o.TokenHeader == "" {
		o.TokenHeader = "Fencing-Token"
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
	th := http.CanonicalHeaderKey(o.TokenHeader)
	rt, err := newRouter(o.Routes, th, o.Metrics)
	if err != nil {
		return nil, err
	}
	// One ReverseProxy per route (they share the Transport): its error
	// handler then counts upstream failures for its route without a
	// per-request context value.
	for _, r := range rt.all() {
		r.forward = newForwarder(o.Upstream, o.Transport, o.Logger.With(zap.String("route", r.name)), r.metrics, r.name)
	}
	p := &Proxy{
		router:       rt,
		store:        o.Store,
		tokenHeader:  th,
		storeTimeout: o.StoreTimeout,
		deadlines:    sharedDeadline{timeout: o.StoreTimeout},
		log:          o.Logger,
	}
	return p, nil
}

// ServeHTTP fences r and forwards it, or answers with a problem. The steps
// run in the order of the house plan: canonical path, route, token, resource,
// admission, forward.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	canon, trailing, err := CanonicalPath(r.URL.EscapedPath())
	if err != nil {
		p.refuse(w, p.router.fallback, decBadRequest, &problem{
			Type: TypeBadRequest, Title: "Ambiguous path", Status: http.StatusBadRequest,
			Detail: err.Error(),
		}, zap.String("path", r.URL.EscapedPath()))
		return
	}
	rt, rctx := p.router.match(r.Method, canon)
	defer p.router.release(rctx)
	m := rt.metrics

	if !rt.fences(r.Method) {
		m.requests[decUnfenced].Inc()
		p.serveForward(w, r, rt, canon, trailing)
		return
	}

	values := r.Header[p.tokenHeader]
	token, err := ParseToken(values)
	if err == nil {
		err = p.checkConnection(r, rt)
	}
	if err != nil {
		var te *TokenError
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
		case errors.As(err, &te):
			p.refuse(w, rt, decMalformed, &problem{
				Type: TypeTokenMalformed, Title: "Malformed fencing token", Status: http.StatusBadRequest,
				Detail: p.tokenHeader + ": " + err.Error(), Route: rt.name,
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
			Detail: err.Error(), Route: rt.name, Token: formatUint(token),
		})
		return
	}
	resource := rt.names.intern(name)

	start := time.Now()
	d, err := p.store.Admit(p.deadlines.context(start), resource, token, rt.compare)
	elapsed := time.Since(start)

	switch {
	case err != nil:
		m.unavailable.Observe(elapsed.Seconds())
		p.refuse(w, rt, decUnavailable, &problem{
			Type: TypeStoreUnavailable, Title: "Fence store unavailable", Status: http.StatusServiceUnavailable,
			Detail: "the fence store did not admit the token within " + p.storeTimeout.String() +
				"; nothing was forwarded (the store may still have recorded the token)",
			Route: rt.name, Resource: resource, Token: formatUint(token),
		}, zap.Error(err))
	case !d.Admitted:
		m.stale.Observe(elapsed.Seconds())
		p.refuse(w, rt, decStale, &problem{
			Type: TypeStaleToken, Title: "Stale fencing token", Status: http.StatusConflict,
			Detail: "token " + formatUint(token) + " is older than the resource's high-water mark " +
				formatUint(d.Mark) + ": a newer lease holder has written",
			Route: rt.name, Resource: resource, Token: formatUint(token), HighWaterMark: formatUint(d.Mark),
		})
	default:
		m.admitted.Observe(elapsed.Seconds())
		m.requests[decAdmitted].Inc()
		if ce := p.log.Check(zapcore.DebugLevel, "admitted"); ce != nil {
			ce.Write(zap.String("route", rt.name), zap.String("resource", resource),
				zap.Uint64("token", token), zap.Uint64("mark", d.Mark), zap.Duration("duration", elapsed))
		}
		p.serveForward(w, r, rt, canon, trailing)
	}
}

// refuse counts, logs (info: refusals are what an operator looks for) and
// answers a problem. The upstream receives nothing.
func (p *Proxy) refuse(w http.ResponseWriter, rt *route, d decision, pr *problem, extra ...zap.Field) {
	rt.metrics.requests[d].Inc()
	if ce := p.log.Check(zapcore.InfoLevel, "refused"); ce != nil {
		fields := append([]zap.Field{
			zap.String("route", rt.name), zap.String("decision", d.String()), zap.Int("status", pr.Status),
			zap.String("resource", pr.Resource), zap.String("token", pr.Token), zap.String("mark", pr.HighWaterMark),
			zap.String("detail", pr.Detail),
		}, extra...)
		ce.Write(fields...)
	}
	writeProblem(w, pr)
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
// depends on (the token header first, then the template's headers).
func (p *Proxy) checkConnection(r *http.Request, rt *route) error {
	for _, v := range r.Header["Connection"] {
		for v != "" {
			var name string
			name, v, _ = strings.Cut(v, ",")
			name = strings.TrimSpace(name)
			for i, h := range rt.connHeaders {
				if strings.EqualFold(name, h) {
					if i == 0 {
						return errTokenHopByHop
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

package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
)

// route is one entry of the table as the handler uses it: the validated
// config plus what is resolved once at start.
type route struct {
	name          string
	fence         bool
	methods       map[string]bool // default rule only: the methods it fences
	compare       fencestore.Compare
	resource      config.Template
	tokenOptional bool
	// sequence says whether the route's requests carry a sequence (read from
	// the sequence header) that orders the requests of one token.
	sequence config.Sequence
	// drain: the route's admitted requests take part in the drain barrier
	// (FENCE_DRAIN on and no drain: false).
	drain bool
	// dryRun (enforce: false): a refusal is counted as would_<decision>
	// and the request forwarded.
	dryRun bool
	// uints are the path parameters typed {name:uint}.
	uints []string
	// connHeaders are the headers this route's admission depends on: the
	// token header first, then the sequence header when the route has a
	// sequence, then the template's headers. A request whose Connection
	// header names one of them is refused: the hop-by-hop stripping would
	// remove it on the way to the upstream, which would then not see what was
	// fenced.
	connHeaders []string
	metrics     *routeMetrics
	forward     *forwarder
	names       names // interned resource names
}

type routeKey struct {
	method, pattern string
	insensitive     bool
}

// router matches a canonical path and method to a route with chi's rules
// (static beats parameter beats wildcard, method-aware), without building a
// request context: it calls chi's Find with a pooled route context, so a
// match allocates nothing.
//
// It keeps one chi tree per method, so that any method token can be fenced
// (chi's own method table is a process-wide global that knows only the
// standard methods), and two sets of them: case-sensitive routes, matched on
// the path as sent, and case-insensitive routes, matched on the folded path.
type router struct {
	exact    map[string]*chi.Mux // by method
	folded   map[string]*chi.Mux // by method
	byKey    map[routeKey]*route
	fallback *route
	pool     sync.Pool // of *chi.Context
}

// CheckRoutes builds the route table once and reports what chi refuses, with
// the route named, so `fenceproxy check` catches every start-time error.
func CheckRoutes(rs config.Routes) error {
	_, err := newRouter(rs, "", "", NewMetrics())
	return err
}

// newRouter builds the route table. It fails with an error naming the route
// when chi refuses a pattern (chi panics on some malformed patterns; that
// panic is turned into the error here, at start, never at request time).
func newRouter(rs config.Routes, tokenHeader, sequenceHeader string, m *Metrics) (*router, error) {
	rt := &router{
		exact:  make(map[string]*chi.Mux),
		folded: make(map[string]*chi.Mux),
		byKey:  make(map[routeKey]*route),
		pool:   sync.Pool{New: func() any { return chi.NewRouteContext() }},
	}
	noop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for i := range rs.Routes {
		cr := &rs.Routes[i]
		r := newRoute(cr, tokenHeader, sequenceHeader, m)
		pattern := matchPattern(cr.Pattern)
		trees := rt.exact
		if cr.CaseInsensitive {
			trees = rt.folded
		}
		for _, method := range cr.Methods {
			mux := trees[method]
			if mux == nil {
				mux = chi.NewMux()
				trees[method] = mux
			}
			if err := register(mux, pattern, noop); err != nil {
				return nil, fmt.Errorf("route %q: path %q: %w", cr.Name, cr.Path, err)
			}
			rt.byKey[routeKey{method, pattern, cr.CaseInsensitive}] = r
		}
	}
	def := rs.Default
	if def.Name == "" {
		def.Name = "default"
	}
	rt.fallback = newRoute(&def, tokenHeader, sequenceHeader, m)
	rt.fallback.methods = make(map[string]bool, len(def.Methods))
	for _, method := range def.Methods {
		rt.fallback.methods[method] = true
	}
	return rt, nil
}

func newRoute(cr *config.Route, tokenHeader, sequenceHeader string, m *Metrics) *route {
	r := &route{
		name:          cr.Name,
		fence:         cr.Fence,
		resource:      cr.Resource,
		tokenOptional: cr.TokenOptional,
		uints:         cr.UintParams,
		sequence:      cr.Sequence,
		drain:         cr.Fence && !cr.NoDrain,
		dryRun:        cr.Fence && cr.DryRun,
		compare:       fencestore.AtLeast,
		metrics:       m.forRoute(cr.Name, cr.Fence && cr.DryRun),
	}
	if cr.Compare == config.CompareGreater {
		r.compare = fencestore.Greater
	}
	if !r.fence {
		r.sequence = config.SequenceOff // config sets none; a table built by hand might
		return r
	}
	r.connHeaders = append(r.connHeaders, tokenHeader)
	if r.sequence != config.SequenceOff {
		r.connHeaders = append(r.connHeaders, sequenceHeader)
	}
	for _, p := range cr.Resource.Parts {
		if p.Kind == config.PartHeader {
			r.connHeaders = append(r.connHeaders, p.Value)
		}
	}
	return r
}

// matchPattern drops a trailing slash from a pattern: canonical paths never
// end in one (except "/"), so "/orders/" must match "/orders".
func matchPattern(p string) string {
	if len(p) > 1 && strings.HasSuffix(p, "/") && !strings.HasSuffix(p, "/*") {
		return strings.TrimRight(p, "/")
	}
	return p
}

// register adds pattern to a per-method tree. Every tree holds one method,
// so it is registered under GET, a method chi knows.
func register(mux *chi.Mux, pattern string, h http.Handler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	mux.Method(http.MethodGet, pattern, h)
	return nil
}

// match returns the route for method and canonical path, and the route
// context holding the path parameters. The caller must call release when it
// no longer reads the parameters.
//
// A case-sensitive route that matches the path as sent wins; otherwise the
// case-insensitive routes are matched on the folded path (so their
// parameters are folded); otherwise the default rule applies.
func (rt *router) match(method, path string) (*route, *chi.Context) {
	rctx := rt.pool.Get().(*chi.Context)
	rctx.Reset()
	if mux := rt.exact[method]; mux != nil {
		if pattern := mux.Find(rctx, http.MethodGet, path); pattern != "" {
			if r, ok := rt.byKey[routeKey{method, pattern, false}]; ok {
				return r, rctx
			}
		}
	}
	if mux := rt.folded[method]; mux != nil {
		rctx.Reset()
		if pattern := mux.Find(rctx, http.MethodGet, config.FoldPath(path)); pattern != "" {
			if r, ok := rt.byKey[routeKey{method, pattern, true}]; ok {
				return r, rctx
			}
		}
	}
	return rt.fallback, rctx
}

// all returns every route once, the fallback last.
func (rt *router) all() []*route {
	seen := make(map[*route]bool)
	var out []*route
	for _, r := range rt.byKey {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return append(out, rt.fallback)
}

func (rt *router) release(rctx *chi.Context) { rt.pool.Put(rctx) }

// fences reports whether r fences a request with this method: a route from
// the file fences every method it matched; the default rule only its own.
func (r *route) fences(method string) bool {
	if !r.fence {
		return false
	}
	if r.methods != nil {
		return r.methods[method]
	}
	return true
}

// urlParam returns the path parameter name from rctx, and whether it is set.
func urlParam(rctx *chi.Context, name string) (string, bool) {
	ps := &rctx.URLParams
	for i := len(ps.Keys) - 1; i >= 0; i-- {
		if ps.Keys[i] == name {
			return ps.Values[i], true
		}
	}
	return "", false
}

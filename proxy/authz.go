package proxy

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"

	"github.com/fenceproxy/fenceproxy/config"
)

// Headers of the authorization mode's answers. A proxy that drops the body
// of an authorization answer (nginx's auth_request does) can still log the
// decision and give the client the problem: Fence-Problem is the body, as
// JSON on one line.
const (
	HeaderDecision = "Fence-Decision"
	HeaderProblem  = "Fence-Problem"
)

// Authz is fenceproxy's authorization mode (fenceproxy authz): an
// http.Handler that answers, for a proxy the user already runs (nginx
// auth_request, Traefik ForwardAuth, Envoy ext_authz over HTTP), whether the
// original request it describes may go on. The decision is the proxy's own
// (Proxy.decide: the same routes, store, tokens, marks and metrics); only
// the outcome differs: 200 and an empty body where the proxy forwards, the
// proxy's problem where it refuses. Nothing is forwarded.
//
// What this mode cannot do: the drain barrier (fenceproxy never sees the
// request reach the upstream or its response end) and reading the body
// before admission (the asking proxy sends none). A request admitted here
// can still be delayed between the asking proxy and the upstream, past a
// newer holder's write; the proxy mode closes that race, this one cannot.
type Authz struct {
	p      *Proxy
	prefix string
}

// NewAuthz builds the authorization handler. o.Upstream and o.Transport are
// ignored. pathPrefix (FENCE_AUTHZ_PATH_PREFIX) is removed from a request's
// own path when no header names the original URI (Envoy's HTTP ext_authz
// sends the original path after its path_prefix).
func NewAuthz(o Options, pathPrefix string) (*Authz, error) {
	o.Upstream, o.Transport = nil, nil
	p, err := newProxy(o)
	if err != nil {
		return nil, err
	}
	warnFencedReads(p.log, o.Routes)
	return &Authz{p: p, prefix: strings.TrimSuffix(pathPrefix, "/")}, nil
}

// SetRoutes puts a new route table in force, as Proxy.SetRoutes.
func (a *Authz) SetRoutes(rs config.Routes) error {
	if err := a.p.SetRoutes(rs); err != nil {
		return err
	}
	warnFencedReads(a.p.log, rs)
	return nil
}

// readMethods are the methods the shipped front-proxy configurations do not
// ask about (deploy/nginx, deploy/integrations): reads, so that they never
// depend on fenceproxy.
var readMethods = []string{http.MethodGet, http.MethodHead, http.MethodOptions}

// warnFencedReads logs a warning for every rule of rs that fences GET, HEAD
// or OPTIONS: behind a shipped front-proxy configuration such a request is
// never asked about (so never fenced) unless the operator removed the
// method from its read rule.
func warnFencedReads(log *zap.Logger, rs config.Routes) {
	for _, r := range append(slices.Clone(rs.Routes), rs.Default) {
		if !r.Fence {
			continue
		}
		var reads []string
		for _, m := range r.Methods {
			if slices.Contains(readMethods, m) {
				reads = append(reads, m)
			}
		}
		if len(reads) > 0 {
			log.Warn("a route fences a read method, which the shipped nginx, Envoy, Istio and Traefik configurations do not ask about: "+
				"remove it from their read rule, or these requests reach the app unfenced",
				zap.String("route", r.Name), zap.Strings("methods", reads))
		}
	}
}

// ServeHTTP answers one authorization question: 200 with an empty body when
// the original request is admitted or not fenced (or refused on a dry-run
// route), else the status and problem the proxy would answer. Every answer
// names its decision in Fence-Decision, and carries the question's request
// id in X-Request-Id (a new one when the question has none).
func (a *Authz) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.p.metrics.inFlight.Inc()
	defer a.p.metrics.inFlight.Dec()
	tab := a.p.table.Load()
	var vv verdict
	v := &vv
	if orig, k, detail := a.original(r); k != 0 {
		v.rt = tab.fallback
		v.refused(k, detail)
	} else {
		v = a.p.decide(v, tab, orig, true)
	}
	a.p.traceVerdict(r, v, false)
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	returnRequestID(w, r.Header)
	switch {
	case v.pr == nil:
		v.rt.metrics.requests[v.dec].Inc()
		h.Set(HeaderDecision, v.dec.String())
		w.WriteHeader(http.StatusOK)
	case a.p.dryRun(v):
		a.p.countRefusal(v, r)
		h.Set(HeaderDecision, v.dec.would().String())
		w.WriteHeader(http.StatusOK)
	default:
		a.p.countRefusal(v, r)
		h.Set(HeaderDecision, v.dec.String())
		// The problem as one header line: JSON escapes every control
		// character, so it cannot break the header block.
		h.Set(HeaderProblem, string(v.pr.marshal()))
		a.p.writeRefusal(w, r, v.pr)
	}
}

// original is the request r asks about: its method from X-Original-Method
// or X-Forwarded-Method, its URI from X-Original-URI or X-Forwarded-Uri,
// else r's own (the path without the prefix), and r's headers. When both
// headers of a pair are present and differ, or one is repeated, the
// question is ambiguous: one of them may have come from the client (a
// proxy that passes the client's headers on and sets only its own), and
// choosing either could fence another request than the one that goes on.
func (a *Authz) original(r *http.Request) (*http.Request, refusal, string) {
	method, err := originalOf(r.Header, "X-Original-Method", "X-Forwarded-Method")
	if err != nil {
		return nil, refOriginalAmbiguous, err.Error()
	}
	uri, err := originalOf(r.Header, "X-Original-Uri", "X-Forwarded-Uri")
	if err != nil {
		return nil, refOriginalAmbiguous, err.Error()
	}
	o := new(http.Request)
	*o = *r
	if method != "" {
		if !httpguts.ValidHeaderFieldName(method) { // a method is a token, as a header name is
			return nil, refOriginalAmbiguous, "the original method " + quoteShort(method) + " is not an HTTP method"
		}
		o.Method = method
	}
	switch {
	case uri != "":
		u, err := url.ParseRequestURI(uri)
		if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(uri, "/") {
			return nil, refOriginalAmbiguous, "the original URI " + quoteShort(uri) + " is not a path with an optional query"
		}
		o.URL = u
		// The URI as the asking proxy was sent it: a raw '#' in it is
		// refused as in a request target.
		o.RequestURI = uri
	case a.prefix != "":
		path := r.URL.EscapedPath()
		rest, ok := strings.CutPrefix(path, a.prefix)
		if !ok || (rest != "" && rest[0] != '/') {
			return nil, refOriginalAmbiguous, "no X-Original-URI or X-Forwarded-Uri header, and the path does not start with " +
				"FENCE_AUTHZ_PATH_PREFIX " + quoteShort(a.prefix)
		}
		if rest == "" {
			rest = "/"
		}
		u, err := url.ParseRequestURI(rest)
		if err != nil {
			return nil, refOriginalAmbiguous, "the path after FENCE_AUTHZ_PATH_PREFIX does not parse: " + err.Error()
		}
		u.RawQuery = r.URL.RawQuery
		o.URL = u
	}
	return o, 0, ""
}

// spelledCanonically reports whether escaped, a path as sent, spells the
// canonical path canon (decoded; with the trailing slash it was sent with):
// as canon itself, or as canon percent-encoded the way Go encodes a path
// (so "/orders/caf%C3%A9" spells "/orders/café"). A dot segment, a doubled
// slash or an escape of a character that needs none ("%34%32" for "42")
// does not.
func spelledCanonically(escaped, canon string, trailing bool) bool {
	if trailing && canon != "/" {
		canon += "/"
	}
	return escaped == canon || escaped == (&url.URL{Path: canon}).EscapedPath()
}

// originalOf is the value of the first or the second header, "" when
// neither is present; an error when one is repeated or the two differ.
func originalOf(h http.Header, first, second string) (string, error) {
	a, b := h[first], h[second]
	if len(a) > 1 || len(b) > 1 {
		return "", errors.New("a repeated " + first + " or " + second + " header")
	}
	switch {
	case len(a) == 1 && len(b) == 1 && a[0] != b[0]:
		return "", errors.New(first + " and " + second + " name different values; the proxy asking must set one itself " +
			"and drop the client's (a client could otherwise choose what is fenced)")
	case len(a) == 1:
		return a[0], nil
	case len(b) == 1:
		return b[0], nil
	}
	return "", nil
}

// quoteShort quotes s for a problem's detail, cut to 200 bytes: the detail
// names what was wrong without echoing an arbitrarily long header back.
func quoteShort(s string) string {
	const max = 200
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}

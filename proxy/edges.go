package proxy

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The edges of a request: the parts of it that a framework behind
// fenceproxy may read differently from the way fenceproxy reads them. Each
// is refused, stripped, or read the framework's way, so that what
// fenceproxy fences is what the app acts on (docs/routes.md lists them, and
// what stays out of reach).

// DefaultMethodOverrideHeaders are the request headers that frameworks read
// as the request's method (Rails, Symfony, Laravel, Express's
// method-override, ASP.NET, Google's APIs). A request carrying one is routed
// and fenced as the method it names; Options.MethodOverrideHeaders adds
// more.
var DefaultMethodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// overrideHeaders is DefaultMethodOverrideHeaders and extra, in canonical
// form, each once.
func overrideHeaders(extra []string) []string {
	out := append([]string(nil), DefaultMethodOverrideHeaders...)
	for _, h := range extra {
		if h = http.CanonicalHeaderKey(strings.TrimSpace(h)); h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// methodOverrideParam is the query parameter frameworks read as the method
// (Rails, Symfony and Laravel call it _method).
const methodOverrideParam = "_method"

// reservedHeaders are request headers a client must never get to the app:
// Fence-Decision and Fence-Problem are fenceproxy's own (an app, or a proxy
// in front of it, may trust them), and X-Original-URL and X-Rewrite-URL are
// read as the request's path by IIS, Symfony before 5 and Zend, which would
// then serve another path than the one fenced. The proxy strips them; the
// authorization mode, which cannot strip what the asking proxy forwards,
// refuses a question that carries one.
var reservedHeaders = []string{HeaderDecision, HeaderProblem, "X-Original-Url", "X-Rewrite-Url"}

// Errors of the request's edges; their text is a problem's detail and never
// echoes what the client sent beyond a short quote.
var (
	errTargetFragment = errors.New("the request target holds a raw '#': a fragment is never sent in HTTP, and servers and " +
		"frameworks disagree on where it ends (one drops it, another keeps it in the path or the query), so the resource " +
		"fenced could differ from the one the app acts on; percent-encode it as %23")
	errOverrideQuery = errors.New("the query string mentions a method override and does not parse: the app could read a method " +
		"fenceproxy cannot see")
)

// overrideError says why the method override of a request is refused.
type overrideError struct{ detail string }

func (e *overrideError) Error() string { return e.detail }

// targetHasFragment reports whether the request target, as sent, holds a
// raw '#'. RFC 9112 allows none there; net/http keeps it in the path (so
// "/a#b" and "/a%23b" look alike in r.URL) or in the query, so the target
// as sent decides. A request built in the process (no RequestURI) is
// judged by its URL.
func targetHasFragment(r *http.Request) bool {
	if r.RequestURI != "" {
		return strings.IndexByte(r.RequestURI, '#') >= 0
	}
	return r.URL.Fragment != "" || r.URL.RawFragment != "" || strings.IndexByte(r.URL.RawQuery, '#') >= 0
}

// methodOverride returns the method r asks to be treated as, upper-cased,
// or "" when it asks for none: the value of one of headers (empty values
// do not count, as frameworks ignore them) or of _method in the query. The
// query is read as PHP reads it too ("_method", " method", ".method" and
// "_method[...]" are one name there), case-insensitively, so no spelling a
// framework takes for _method escapes.
//
// It refuses what a framework could read as another method than the one
// fenced: two sources naming different methods, a repeated header or
// parameter, a comma list, a value that is not a method token, a query
// that mentions "method" and does not parse, and a Connection header
// naming an override header (hop-by-hop, it would not reach the app, which
// would then act on the request's own method).
func methodOverride(r *http.Request, headers []string) (string, error) {
	var method, from string
	take := func(v, source string) error {
		if !httpguts.ValidHeaderFieldName(v) { // a method is a token, as a header name is
			return &overrideError{source + " " + quoteShort(v) + " is not an HTTP method"}
		}
		v = strings.ToUpper(v)
		switch {
		case method == "":
			method, from = v, source
		case method != v:
			return &overrideError{from + " and " + source + " name different methods (" + method + ", " + v +
				"): frameworks differ on which one wins, so the request is ambiguous"}
		}
		return nil
	}
	for _, h := range headers {
		vs := r.Header[h]
		if len(vs) == 0 {
			continue
		}
		if len(vs) > 1 {
			return "", &overrideError{"the " + h + " header is repeated: frameworks differ on which one wins"}
		}
		v := strings.TrimSpace(vs[0])
		if v == "" {
			continue
		}
		if strings.IndexByte(v, ',') >= 0 {
			return "", &overrideError{"the " + h + " header is a comma-separated list: frameworks differ on which method wins"}
		}
		if connectionNames(r.Header, h) {
			return "", &overrideError{"the Connection header names " + h + ", which would strip it before the app: the app would " +
				"act on another method than the one fenced"}
		}
		if err := take(v, "the "+h+" header"); err != nil {
			return "", err
		}
	}
	// The query: only one that could name the parameter is parsed (an
	// escape could spell it, "%5Fmethod").
	if q := r.URL.RawQuery; q != "" && (containsFold(q, "method") || strings.IndexByte(q, '%') >= 0) {
		n := 0
		for q != "" {
			// Split on ';' too: Python before 3.9.2 and older frameworks do.
			var pair string
			pair, q, _ = cutAny(q, "&;")
			k, v, _ := strings.Cut(pair, "=")
			key, err1 := url.QueryUnescape(k)
			val, err2 := url.QueryUnescape(v)
			switch {
			case err1 != nil || err2 != nil:
				if containsFold(k, "method") {
					return "", errOverrideQuery
				}
				continue
			case val == "" || !isOverrideParam(key):
				continue
			}
			if n++; n > 1 {
				return "", &overrideError{"the query parameter " + methodOverrideParam + " is repeated: frameworks differ on which one wins"}
			}
			if strings.IndexByte(val, ',') >= 0 {
				return "", &overrideError{"the query parameter " + methodOverrideParam + " is a comma-separated list"}
			}
			if err := take(val, "the query parameter "+methodOverrideParam); err != nil {
				return "", err
			}
		}
	}
	return method, nil
}

// isOverrideParam reports whether a decoded query key is _method as some
// framework reads it: any case, PHP's " " and "." for "_", and PHP's array
// form _method[...].
func isOverrideParam(key string) bool {
	if i := strings.IndexByte(key, '['); i >= 0 {
		key = key[:i]
	}
	if len(key) != len(methodOverrideParam) {
		return false
	}
	if c := key[0]; c != '_' && c != ' ' && c != '.' {
		return false
	}
	return strings.EqualFold(key[1:], methodOverrideParam[1:])
}

// cutAny cuts s around the first byte of chars.
func cutAny(s, chars string) (before, after string, found bool) {
	if i := strings.IndexAny(s, chars); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

// containsFold reports whether s contains the lower-case ASCII word sub in
// any case.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// connectionNames reports whether a Connection header of h names header.
func connectionNames(h http.Header, header string) bool {
	for _, v := range h["Connection"] {
		for v != "" {
			var name string
			name, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(name), header) {
				return true
			}
		}
	}
	return false
}

// underscoreTwin returns the name of a header of h that is one of names
// spelled with '_' for '-' ("Fencing_Token"), or "". CGI, WSGI (Django,
// Flask), Rack and PHP read both spellings as one variable, HTTP_FENCING_TOKEN,
// and differ on which wins, so such a twin could give the app another token,
// resource or method than the one fenced.
func underscoreTwin(h http.Header, names []string) string {
	for k := range h {
		if strings.IndexByte(k, '_') < 0 {
			continue
		}
		for _, n := range names {
			if sameButUnderscores(k, n) {
				return k
			}
		}
	}
	return ""
}

// hasUnderscoreName reports whether a header name of h holds '_': without
// one no header is an underscore twin of any name, and the request's
// header map need not be walked again for each set of names (the reserved
// headers, the override headers, the route's own).
func hasUnderscoreName(h http.Header) bool {
	for k := range h {
		if strings.IndexByte(k, '_') >= 0 {
			return true
		}
	}
	return false
}

// sameButUnderscores reports whether a equals b, ignoring case and taking
// '_' in a for '-'.
func sameButUnderscores(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		c, d := a[i], b[i]
		if c == '_' {
			c = '-'
		}
		if c != d && lowerASCII(c) != lowerASCII(d) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// reservedHeaderOf returns the name of a reserved header h carries (in any
// spelling a framework reads as it, '_' for '-' included), or "". twins is
// hasUnderscoreName(h).
func reservedHeaderOf(h http.Header, twins bool) string {
	for _, n := range reservedHeaders {
		if _, ok := h[n]; ok {
			return n
		}
	}
	if !twins {
		return ""
	}
	return underscoreTwin(h, reservedHeaders)
}

// stripReserved removes the reserved headers from h, in every spelling a
// framework reads as one of them. twins is hasUnderscoreName(h).
func stripReserved(h http.Header, twins bool) {
	for _, n := range reservedHeaders {
		delete(h, n)
	}
	for twins {
		k := underscoreTwin(h, reservedHeaders)
		if k == "" {
			return
		}
		delete(h, k)
	}
}

// underscoreError refuses a header spelled with '_' for a header the fence
// reads (underscoreTwin).
type underscoreError struct{ header string }

func (e *underscoreError) Error() string {
	return "the request carries " + quoteShort(e.header) + ", which CGI-style frameworks read as a header the fence reads " +
		"(the token, the sequence or a resource header): the app could see another value than the one fenced"
}

// queryTwin reports whether query holds a key other than name that some
// framework reads as name: ASP.NET matches keys without regard to case, PHP
// turns ' ' and '.' in a key into '_' and reads name[...] as an array
// named name, qs (Express) does the same for name[...]. One of
// them could give the app another value than the one fenced.
func queryTwin(query url.Values, name string) bool {
	want := queryKeyFold(name)
	for k := range query {
		if k != name && queryKeyFold(k) == want {
			return true
		}
	}
	return false
}

// queryKeyFold is a query key as the most lenient framework reads it: lower
// case, ' ' and '.' as '_', cut at the first '['.
func queryKeyFold(k string) string {
	if i := strings.IndexByte(k, '['); i >= 0 {
		k = k[:i]
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r == ' ' || r == '.':
			return '_'
		case 'A' <= r && r <= 'Z':
			return r + 'a' - 'A'
		}
		return r
	}, k)
}

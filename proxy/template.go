package proxy

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"

	"github.com/fenceproxy/fenceproxy/config"
)

// templateError says why a resource template could not be filled; the
// request gets 400 bad-request.
type templateError struct{ detail string }

func (e *templateError) Error() string { return e.detail }

// fillResource appends the resource name of t for request r, whose path
// parameters are in rctx, to dst.
//
// Path parameters are substituted as matched (they are segments of the
// canonical path, so they hold no '/'; the wildcard "*" may). Header and query
// values come from the client verbatim, so '%' and '/' in them are escaped
// (%25, %2F): a value can then never spell the key of another resource, e.g.
// a tenant header "a/orders/7" cannot land on the key of tenant "a"'s order 7.
// An absent, empty or repeated header or query value is an error: the
// resource would be ambiguous.
//
// A header value that is a comma-separated list is refused like the token
// header's: intermediaries and frameworks disagree about which element wins.
// The name may be at most MaxResourceLen bytes; a longer one is refused
// before it is copied, so a client cannot make the proxy hold megabytes.
func fillResource(dst []byte, t *config.Template, r *http.Request, rctx *chi.Context, query url.Values) ([]byte, error) {
	for _, p := range t.Parts {
		switch p.Kind {
		case config.PartLiteral:
			dst = append(dst, p.Value...)
		case config.PartParam:
			v, ok := urlParam(rctx, p.Value)
			if !ok || v == "" {
				return nil, &templateError{"path parameter {" + p.Value + "} is empty"}
			}
			if len(dst)+len(v) > MaxResourceLen {
				return nil, errResourceTooLong
			}
			dst = append(dst, v...)
		case config.PartHeader:
			vs := r.Header[p.Value]
			if p.Value == "Host" { // Go moves Host out of the header map
				vs = []string{r.Host}
			}
			switch {
			case len(vs) == 0 || vs[0] == "":
				return nil, &templateError{"header " + p.Value + " is required to name the resource"}
			case len(vs) > 1:
				return nil, &templateError{"header " + p.Value + " is repeated; the resource would be ambiguous"}
			case strings.IndexByte(vs[0], ',') >= 0:
				return nil, &templateError{"header " + p.Value + " is a comma-separated list; the resource would be ambiguous"}
			case len(dst)+len(vs[0]) > MaxResourceLen:
				return nil, errResourceTooLong
			}
			dst = appendEscaped(dst, vs[0])
		case config.PartQuery:
			vs := query[p.Value]
			switch {
			case len(vs) == 0 || vs[0] == "":
				return nil, &templateError{"query parameter " + p.Value + " is required to name the resource"}
			case len(vs) > 1:
				return nil, &templateError{"query parameter " + p.Value + " is repeated; the resource would be ambiguous"}
			case len(query) > 1 && queryTwin(query, p.Value):
				return nil, &templateError{"the query holds another spelling of parameter " + p.Value + " (another case, '.' or " +
					"' ' for '_', or name[...]), which some frameworks read as it; the resource would be ambiguous"}
			case len(dst)+len(vs[0]) > MaxResourceLen:
				return nil, errResourceTooLong
			}
			dst = appendEscaped(dst, vs[0])
		}
	}
	if len(dst) > MaxResourceLen { // escaping or literals made it longer
		return nil, errResourceTooLong
	}
	return dst, nil
}

// MaxResourceLen bounds a resource name, in bytes (before the store's key
// prefix). Real names are short ("tenants/acme/orders/42"); the bound keeps a
// client from making the proxy copy, and the store keep, megabytes.
const MaxResourceLen = 1024

var errResourceTooLong = &templateError{"the resource name would be longer than " + strconv.Itoa(MaxResourceLen) + " bytes"}

func appendEscaped(dst []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '%':
			dst = append(dst, "%25"...)
		case '/':
			dst = append(dst, "%2F"...)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// maxInterned bounds how many resource names one route keeps.
const maxInterned = 4096

// names interns the admitted resource names of one route, so that filling a
// template for a resource seen before allocates nothing: the name is looked
// up by its bytes (a map index with string(b) does not allocate). Only names
// that were admitted are added, and at most maxInterned of them (at most
// maxInterned * MaxResourceLen bytes), so a client that invents names cannot
// grow memory.
type names struct {
	mu sync.RWMutex
	m  map[string]string
}

// lookup returns the interned name equal to b, or a new string of b and
// false.
func (n *names) lookup(b []byte) (string, bool) {
	n.mu.RLock()
	s, ok := n.m[string(b)]
	n.mu.RUnlock()
	if ok {
		return s, true
	}
	return string(b), false
}

// add interns s, unless the table is full.
func (n *names) add(s string) {
	n.mu.Lock()
	if n.m == nil {
		n.m = make(map[string]string)
	}
	if len(n.m) < maxInterned {
		n.m[s] = s
	}
	n.mu.Unlock()
}

// needsQuery reports whether t reads the query string, so the handler parses
// it only when a template needs it.
func needsQuery(t *config.Template) bool {
	for _, p := range t.Parts {
		if p.Kind == config.PartQuery {
			return true
		}
	}
	return false
}

package proxy

import (
	"net/http"
	"net/url"
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
			}
			dst = appendEscaped(dst, vs[0])
		case config.PartQuery:
			vs := query[p.Value]
			switch {
			case len(vs) == 0 || vs[0] == "":
				return nil, &templateError{"query parameter " + p.Value + " is required to name the resource"}
			case len(vs) > 1:
				return nil, &templateError{"query parameter " + p.Value + " is repeated; the resource would be ambiguous"}
			}
			dst = appendEscaped(dst, vs[0])
		}
	}
	return dst, nil
}

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

// names interns the resource names of one route, so that filling a template
// for a resource seen before allocates nothing: the name is looked up by its
// bytes (a map index with string(b) does not allocate). Past maxInterned
// names a new one is allocated per request, as without the cache; the bound
// keeps a client that invents names from growing memory.
type names struct {
	mu sync.RWMutex
	m  map[string]string
}

func (n *names) intern(b []byte) string {
	n.mu.RLock()
	s, ok := n.m[string(b)]
	n.mu.RUnlock()
	if ok {
		return s
	}
	s = string(b)
	n.mu.Lock()
	if n.m == nil {
		n.m = make(map[string]string)
	}
	if len(n.m) < maxInterned {
		n.m[s] = s
	}
	n.mu.Unlock()
	return s
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

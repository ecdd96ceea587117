package proxy

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/fenceproxy/fenceproxy/config"
)

// templateError says why a resource template could not be filled; the
// request gets 400 bad-request.
type templateError struct{ detail string }

func (e *templateError) Error() string { return e.detail }

// fillResource fills t for request r whose path parameters are in rctx.
//
// Path parameters are substituted as matched (they are segments of the
// canonical path, so they hold no '/'; the wildcard "*" may). Header and query
// values come from the client verbatim, so '%' and '/' in them are escaped
// (%25, %2F): a value can then never spell the key of another resource, e.g.
// a tenant header "a/orders/7" cannot land on the key of tenant "a"'s order 7.
// An absent, empty or repeated header or query value is an error: the
// resource would be ambiguous.
func fillResource(t *config.Template, r *http.Request, rctx *chi.Context, query url.Values) (string, error) {
	if len(t.Parts) == 1 && t.Parts[0].Kind == config.PartLiteral {
		return t.Parts[0].Value, nil // the common fixed resource: no allocation
	}
	var b strings.Builder
	b.Grow(len(t.Raw) + 16)
	for _, p := range t.Parts {
		switch p.Kind {
		case config.PartLiteral:
			b.WriteString(p.Value)
		case config.PartParam:
			v, ok := urlParam(rctx, p.Value)
			if !ok || v == "" {
				return "", &templateError{"path parameter {" + p.Value + "} is empty"}
			}
			b.WriteString(v)
		case config.PartHeader:
			vs := r.Header[p.Value]
			if p.Value == "Host" { // Go moves Host out of the header map
				vs = []string{r.Host}
			}
			switch {
			case len(vs) == 0 || vs[0] == "":
				return "", &templateError{"header " + p.Value + " is required to name the resource"}
			case len(vs) > 1:
				return "", &templateError{"header " + p.Value + " is repeated; the resource would be ambiguous"}
			}
			writeEscaped(&b, vs[0])
		case config.PartQuery:
			vs := query[p.Value]
			switch {
			case len(vs) == 0 || vs[0] == "":
				return "", &templateError{"query parameter " + p.Value + " is required to name the resource"}
			case len(vs) > 1:
				return "", &templateError{"query parameter " + p.Value + " is repeated; the resource would be ambiguous"}
			}
			writeEscaped(&b, vs[0])
		}
	}
	return b.String(), nil
}

func writeEscaped(b *strings.Builder, v string) {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '%':
			b.WriteString("%25")
		case '/':
			b.WriteString("%2F")
		default:
			b.WriteByte(c)
		}
	}
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

package config

import (
	"fmt"
	"net/http"
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
)

// FuzzParseRoutes checks that ParseRoutes never panics, that what it accepts
// is well formed, and that every route it accepts can be registered with chi
// (which panics on patterns it cannot route).
func FuzzParseRoutes(f *testing.F) {
	for _, seed := range []string{
		"",
		"routes: []\n",
		"default:\n  fence: false\n",
		"routes:\n  - name: order-writes\n    methods: [PUT, PATCH, DELETE]\n    path: /orders/{orderID}\n    resource: orders/{orderID}\n    compare: \">=\"\n    token: required\n  - name: reports\n    path: /reports/*\n    fence: false\ndefault:\n  resource: default\n",
		"routes:\n  - {name: a, path: '/o/{id:[0-9]{3}}/*', resource: 'o/{id}/{*}/{header:x-t}/{query:v}', compare: '>', token: optional}\n",
		"routes:\n  - {name: a, path: '/o/{id}', resource: o}\n  - {name: b, path: '/o/{x}', methods: [post], resource: o}\n",
		"routes:\n  - &r {name: a, path: /a, resource: a}\n  - <<: *r\n    name: b\n    path: /b\n",
		"routes:\n  - name: a\n    path: /a\n    resource: a\n    bogus: 1\n",
		"routes: [{name: a, path: /a/{b}{c}, resource: x}]\n",
		"case: insensitive\nroutes:\n  - {name: a, path: '/Orders/{id:uint}', methods: [mkcol, MOVE], resource: 'o/{id}'}\n  - {name: b, path: /orders/{id}, case: sensitive, resource: b}\n",
		// The sequence key: each value, on a route and on the default rule.
		"routes:\n  - {name: a, path: '/o/{id}', resource: 'o/{id}', sequence: required}\n  - {name: b, path: /b, resource: b, sequence: optional}\n  - {name: c, path: /c, resource: c, sequence: off, compare: '>'}\ndefault:\n  sequence: optional\n",
		// Contradictions: an unfenced rule with a sequence; ">" with a sequence, required or optional.
		"routes:\n  - {name: a, path: /a, fence: false, sequence: off}\n  - {name: b, path: /b, resource: b, compare: '>', sequence: required}\ndefault:\n  fence: false\n  sequence: required\n",
		// Spellings that are not the key's values: YAML 1.1 booleans, case, a list.
		"routes:\n  - {name: a, path: /a, resource: a, sequence: no}\n  - {name: b, path: /b, resource: b, sequence: Required}\n  - {name: c, path: /c, resource: c, sequence: [required]}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := ParseRoutes(data)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if line == "" {
					t.Fatalf("empty problem line in %q", err)
				}
			}
			return
		}
		all := append(slices.Clone(rs.Routes), rs.Default)
		for _, r := range all {
			checkRoute(t, r)
		}
		if rs.Default.Name != "default" || rs.Default.Path != "" {
			t.Fatalf("bad default rule %+v", rs.Default)
		}
		// The proxy keeps one chi tree per method and per case mode (any
		// method token may be fenced; chi knows only the standard ones), and
		// registers Pattern under GET in it.
		routers := map[string]*chi.Mux{}
		for _, r := range rs.Routes {
			for _, m := range r.Methods {
				key := fmt.Sprint(m, r.CaseInsensitive)
				if routers[key] == nil {
					routers[key] = chi.NewRouter()
				}
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("chi panics on %s %q: %v", m, r.Pattern, p)
						}
					}()
					routers[key].Method(http.MethodGet, r.Pattern, http.NotFoundHandler())
				}()
			}
		}
	})
}

// checkRoute fails t unless r is a well-formed validated route.
func checkRoute(t *testing.T, r Route) {
	t.Helper()
	if len(r.Methods) == 0 {
		t.Fatalf("route %q has no methods", r.Name)
	}
	for i, m := range r.Methods {
		if !validHeaderName(m) || strings.ToUpper(m) != m || slices.Contains(r.Methods[:i], m) {
			t.Fatalf("route %q: bad methods %q", r.Name, r.Methods)
		}
	}
	if !r.Fence {
		if !reflect.DeepEqual(r.Resource, Template{}) || r.Compare != "" || r.TokenOptional || r.Sequence != SequenceOff {
			t.Fatalf("unfenced route %q has fencing settings: %+v", r.Name, r)
		}
		return
	}
	if r.Compare != CompareAtLeast && r.Compare != CompareGreater {
		t.Fatalf("route %q: compare %q", r.Name, r.Compare)
	}
	switch {
	case r.Sequence > SequenceOptional:
		t.Fatalf("route %q: sequence %v", r.Name, r.Sequence)
	case r.Sequence != SequenceOff && r.Compare == CompareGreater:
		t.Fatalf("route %q: compare \">\" accepted with sequence: %v", r.Name, r.Sequence)
	}
	if len(r.Resource.Parts) == 0 || r.Resource.String() != r.Resource.Raw {
		t.Fatalf("route %q: bad resource %#v", r.Name, r.Resource)
	}
	if r.Path == "" {
		return
	}
	p, err := parsePattern(r.Path)
	if err != nil {
		t.Fatalf("route %q: accepted path %q: %v", r.Name, r.Path, err)
	}
	if want := p.chi; r.Pattern != want && r.Pattern != foldPattern(want) {
		t.Fatalf("route %q: pattern %q for path %q", r.Name, r.Pattern, r.Path)
	}
	again, err := ParseTemplate(r.Resource.Raw, p.params, p.wildcard)
	if err != nil || !reflect.DeepEqual(again, r.Resource) {
		t.Fatalf("route %q: resource %q does not parse again: %v", r.Name, r.Resource.Raw, err)
	}
}

// FuzzParseTemplate checks that ParseTemplate never panics and that a
// template it accepts spells the input (up to the case of header names) and
// parses again to itself.
func FuzzParseTemplate(f *testing.F) {
	for _, seed := range []struct {
		s, params string
		wildcard  bool
	}{
		{"default", "", false},
		{"orders/{orderID}", "orderID", false},
		{"files/{*}", "", true},
		{"t/{header:x-tenant}/jobs/{query:job}", "", false},
		{"{a}{b}-{header:X}{query:q:r}", "a,b", false},
		{"{cookie:x}", "", false},
		{"a/{", "", false},
		{"}{", "", false},
		{"{}", "", false},
	} {
		f.Add(seed.s, seed.params, seed.wildcard)
	}
	f.Fuzz(func(t *testing.T, s, paramList string, wildcard bool) {
		var params []string
		if paramList != "" {
			params = strings.Split(paramList, ",")
		}
		tmpl, err := ParseTemplate(s, params, wildcard)
		if err != nil {
			return
		}
		if got := tmpl.String(); got != tmpl.Raw {
			t.Fatalf("parts join to %q, Raw is %q", got, tmpl.Raw)
		}
		if !sameUpToASCIICase(tmpl.Raw, s) {
			t.Fatalf("Raw %q does not spell the input %q", tmpl.Raw, s)
		}
		for i, p := range tmpl.Parts {
			switch p.Kind {
			case PartLiteral:
				if p.Value == "" || strings.ContainsAny(p.Value, "{}") || i > 0 && tmpl.Parts[i-1].Kind == PartLiteral {
					t.Fatalf("bad literal part %d in %#v", i, tmpl)
				}
			case PartParam:
				if !slices.Contains(params, p.Value) && !(wildcard && p.Value == "*") {
					t.Fatalf("param %q not allowed in %#v", p.Value, tmpl)
				}
			case PartHeader:
				if !validHeaderName(p.Value) || textproto.CanonicalMIMEHeaderKey(p.Value) != p.Value {
					t.Fatalf("header %q not canonical in %#v", p.Value, tmpl)
				}
			case PartQuery:
				if p.Value == "" {
					t.Fatalf("empty query name in %#v", tmpl)
				}
			default:
				t.Fatalf("unknown part kind in %#v", tmpl)
			}
		}
		again, err := ParseTemplate(tmpl.Raw, params, wildcard)
		if err != nil || !reflect.DeepEqual(again, tmpl) {
			t.Fatalf("Raw %q does not parse to the same template: %#v, %v", tmpl.Raw, again, err)
		}
	})
}

// sameUpToASCIICase reports whether a and b differ at most in the case of
// ASCII letters.
func sameUpToASCIICase(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// FuzzFoldPath checks that two UTF-8 paths fold to the same string exactly
// when Unicode simple case folding calls them equal (strings.EqualFold): a
// case-insensitive route then gives every spelling one mark, and never
// merges two paths no framework would.
func FuzzFoldPath(f *testing.F) {
	for _, seed := range [][2]string{
		{"/orders/7", "/ORDERS/7"},
		{"/k", "/\u212a"},
		{"/s", "/\u017f"},
		{"/\u03c3", "/\u03c2"},
		{"/a\xff", "/A\xff"},
		{"/\u00df", "/ss"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		fa, fb := FoldPath(a), FoldPath(b)
		if FoldPath(fa) != fa {
			t.Fatalf("FoldPath(%q) = %q is not a fixed point", a, fa)
		}
		if !utf8.ValidString(a) || !utf8.ValidString(b) {
			return
		}
		if (fa == fb) != strings.EqualFold(a, b) {
			t.Fatalf("FoldPath(%q) = %q, FoldPath(%q) = %q, EqualFold %v", a, fa, b, fb, strings.EqualFold(a, b))
		}
	})
}

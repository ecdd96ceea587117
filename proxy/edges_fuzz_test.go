package proxy

import (
	"bufio"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
)

// The routes FuzzRequestTarget fences: a resource from a path parameter,
// one from a query parameter, and nothing else (so a target that escapes
// both is forwarded unfenced, which the app must then not read as one of
// them).
const fuzzTargetRoutes = `
case: sensitive
routes:
  - name: by-path
    methods: [PUT]
    path: /orders/{id}
    resource: orders/{id}
  - name: by-query
    methods: [PUT]
    path: /q
    resource: q/{query:id}
default:
  fence: false
`

// FuzzRequestTarget checks, for any request target Go's HTTP server
// accepts, that the resource fenceproxy fences is the one the app acts on.
// The app receives what the proxy forwards (the canonical path, the query
// as sent), and it reads it with two parsers: Go's net/url, and a lenient
// one as browsers, Python and Node read a URL (what follows a '#' dropped,
// ';' a query separator as in Python's older parse_qsl, invalid escapes
// kept as they are). For an admitted request both must name the fenced
// resource; for one forwarded unfenced, neither may name a fenced route;
// anything else must be refused (nothing forwarded).
func FuzzRequestTarget(f *testing.F) {
	// The seeds are testdata/fuzz/FuzzRequestTarget, each named after the
	// spelling it tries.
	rs, err := config.ParseRoutes([]byte(fuzzTargetRoutes))
	if err != nil {
		f.Fatal(err)
	}
	up, _ := url.Parse("http://127.0.0.1:1")
	p, err := New(Options{Upstream: up, Routes: rs, Store: memstore.New(), NoDrain: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, target string) {
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(
			"PUT " + target + " HTTP/1.1\r\nHost: app.test\r\nFencing-Token: 1\r\nContent-Length: 0\r\n\r\n")))
		if err != nil {
			return // Go's server refuses it: nothing reaches fenceproxy
		}
		var vv verdict
		v := p.decide(&vv, p.table.Load(), req, false)
		if v.pr != nil {
			return // refused: nothing reaches the app
		}
		// What the proxy forwards (serveForward).
		path := v.canon
		if v.trailing && path != "/" {
			path += "/"
		}
		wire := (&url.URL{Path: path, RawQuery: req.URL.RawQuery}).RequestURI()

		goRes, goFenced := appResource(goParse(t, wire))
		lenRes, lenFenced := appResource(lenientParse(wire))
		switch v.dec {
		case decAdmitted:
			if !goFenced || goRes != v.a.Resource || !lenFenced || lenRes != v.a.Resource {
				t.Fatalf("target %q: fenced %q, but the app receives %q and reads %q (Go) / %q (lenient)",
					target, v.a.Resource, wire, goRes, lenRes)
			}
		case decUnfenced:
			if goFenced || lenFenced {
				t.Fatalf("target %q: forwarded unfenced, but the app receives %q and reads the fenced resource %q (Go) / %q (lenient)",
					target, wire, goRes, lenRes)
			}
		}
	})
}

// appView is what an app reads from a request target: its decoded path
// and every value of the query parameter id.
type appView struct {
	path string
	ids  []string
}

// goParse reads wire as a Go app does.
func goParse(t *testing.T, wire string) appView {
	u, err := url.ParseRequestURI(wire)
	if err != nil {
		t.Fatalf("the proxy forwards %q, which Go cannot parse: %v", wire, err)
	}
	q, _ := url.ParseQuery(u.RawQuery)
	return appView{path: u.Path, ids: q["id"]}
}

// lenientParse reads wire as browsers, Python and Node do: a '#' ends the
// URL, ';' separates query pairs too, '+' is a space in the query, and an
// invalid escape is kept as it is.
func lenientParse(wire string) appView {
	wire, _, _ = strings.Cut(wire, "#")
	path, query, _ := strings.Cut(wire, "?")
	var ids []string
	for _, pair := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		k, val, _ := strings.Cut(pair, "=")
		if lenientUnescape(strings.ReplaceAll(k, "+", " ")) == "id" {
			ids = append(ids, lenientUnescape(strings.ReplaceAll(val, "+", " ")))
		}
	}
	return appView{path: lenientUnescape(path), ids: ids}
}

func lenientUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, ok1 := pathUnhex(s[i+1])
			lo, ok2 := pathUnhex(s[i+2])
			if ok1 && ok2 {
				b.WriteByte(hi<<4 | lo)
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// appResource is the resource an app routed as fuzzTargetRoutes fences
// would act on for a PUT (a trailing slash ignored, as fenceproxy ignores
// it), and whether it is a fenced one. A query naming id more than once is
// one the app resolves its own way: reported as a resource no fence named.
func appResource(v appView) (string, bool) {
	path := v.path
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	if seg, ok := strings.CutPrefix(path, "/orders/"); ok && seg != "" && !strings.Contains(seg, "/") {
		return "orders/" + seg, true
	}
	if path == "/q" {
		switch len(v.ids) {
		case 0:
			return "", false
		case 1:
			return "q/" + string(appendEscaped(nil, v.ids[0])), true
		}
		return "q/(ambiguous)", true
	}
	return "", false
}

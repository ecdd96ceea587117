package proxy

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
	"github.com/fenceproxy/fenceproxy/internal/wiretest"
)

// sendRaw writes one request to the front server byte for byte (a Go
// client would drop a fragment or refuse the target) and returns the
// answer with its body.
func (f *fixture) sendRaw(method, target string, headers ...string) (*http.Response, string) {
	f.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.front.URL, "http://"))
	if err != nil {
		f.t.Fatal(err)
	}
	defer conn.Close()
	var b strings.Builder
	b.WriteString(method + " " + target + " HTTP/1.1\r\nHost: app.test\r\nContent-Length: 7\r\nConnection: close\r\n")
	for i := 0; i+1 < len(headers); i += 2 {
		b.WriteString(headers[i] + ": " + headers[i+1] + "\r\n")
	}
	b.WriteString("\r\npayload")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		f.t.Fatal(err)
	}
	resp, err := wiretest.Answer(conn, 5*time.Second)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// A raw '#' in a request target is refused (400) before anything else: a
// stale write to /orders/abc#x was fenced as the resource orders/abc#x
// (another mark) while servers that drop the fragment acted on orders/abc;
// /items/42#/x matched no {id:uint} route and reached the app unfenced; a
// {query:id} resource kept "#x" in its value. An encoded %23 is a
// character of the name, the same to every parser, and stays accepted.
func TestFragmentRefused(t *testing.T) {
	const routes = `
routes:
  - name: order-writes
    methods: [PUT]
    path: /orders/{id}
    resource: orders/{id}
  - name: items
    methods: [PUT]
    path: /items/{id:uint}
    resource: items/{id}
  - name: by-query
    methods: [PUT]
    path: /q
    resource: q/{query:id}
default:
  fence: false
`
	for _, tc := range []struct {
		name, target, token string
		status              int
	}{
		{"stale token, fragment in the path", "/orders/abc#x", "3", 400},
		{"fragment that leaves a uint route", "/items/42#/x", "", 400},
		{"fragment in the query", "/q?id=abc#x", "3", 400},
		{"fragment alone", "/orders/abc#", "3", 400},
		{"absolute form", "http://app.test/orders/abc#x", "3", 400},
		{"encoded %23 is a character", "/orders/abc%23x", "9", 200},
		{"stale without fragment", "/orders/abc", "3", 409},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, routes, nil)
			// Token 5 is the newest for every resource the test names.
			for _, target := range []string{"/orders/abc", "/items/42", "/q?id=abc"} {
				if resp, body := f.do("PUT", target, "Fencing-Token", "5"); resp.StatusCode != 200 {
					t.Fatalf("setup %s: %d %s", target, resp.StatusCode, body)
				}
			}
			before := len(f.up.received())
			var hdr []string
			if tc.token != "" {
				hdr = []string{"Fencing-Token", tc.token}
			}
			resp, body := f.sendRaw("PUT", tc.target, hdr...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			forwarded := len(f.up.received()) - before
			if tc.status != 200 {
				if forwarded != 0 {
					t.Fatalf("a refused request reached the app: %+v", f.up.received()[before:])
				}
				p := decodeProblem(t, resp, body)
				if tc.status == 400 && (p.Type != TypeBadRequest || p.Title != "Fragment in request target") {
					t.Fatalf("problem %+v", p)
				}
				return
			}
			if got := f.up.received()[before]; forwarded != 1 || got.Path != "/orders/abc#x" {
				t.Fatalf("forwarded %d, the app got %+v", forwarded, got)
			}
		})
	}
}

// In the authorization mode a raw '#' in X-Original-URI or X-Forwarded-Uri
// (nginx passes $request_uri with it) is refused as in a request target.
func TestAuthzFragmentRefused(t *testing.T) {
	srv, _, _ := authzFixture(t, ordersRoutes, "")
	if resp, body := ask(t, srv, "GET", "/auth", "X-Original-Method", "PUT", "X-Original-URI", "/orders/abc", "Fencing-Token", "5"); resp.StatusCode != 200 {
		t.Fatalf("setup: %d %s", resp.StatusCode, body)
	}
	for _, h := range [][]string{
		{"X-Original-Method", "PUT", "X-Original-URI", "/orders/abc#x", "Fencing-Token", "3"},
		{"X-Forwarded-Method", "PUT", "X-Forwarded-Uri", "/orders/abc#x", "Fencing-Token", "3"},
		{"X-Original-Method", "PUT", "X-Original-URI", "/tenants/items?item=3#x", "X-Tenant", "a", "Fencing-Token", "3"},
		{"X-Original-Method", "GET", "X-Original-URI", "/orders/abc#x"},
	} {
		resp, body := ask(t, srv, "GET", "/auth", h...)
		if resp.StatusCode != 400 || resp.Header.Get(HeaderDecision) != "bad_request" || !strings.Contains(body, "Fragment in request target") {
			t.Errorf("%v: %d %s %s", h, resp.StatusCode, resp.Header.Get(HeaderDecision), body)
		}
	}
}

const overrideRoutes = `
routes:
  - name: order-writes
    methods: [PUT, PATCH, DELETE]
    path: /orders/{id}
    resource: orders/{id}
  - name: jobs
    methods: [POST]
    path: /jobs/{id}
    resource: jobs/{id}
default:
  fence: false
`

// Method overrides are routed and fenced as the method they name: with
// PUT fenced on /orders/{id} and POST left to an unfenced default rule, a
// POST carrying X-HTTP-Method-Override: PUT (which Rails, Symfony, Laravel
// and Express apply) reached the app as an unfenced request, stale token or
// none. Overrides that frameworks could read differently are refused.
func TestMethodOverride(t *testing.T) {
	for _, tc := range []struct {
		name    string
		target  string
		headers []string
		status  int
		title   string // of the problem; "" for any
	}{
		{"header, stale token", "/orders/42", []string{"X-HTTP-Method-Override", "PUT", "Fencing-Token", "3"}, 409, ""},
		{"header, no token", "/orders/42", []string{"X-HTTP-Method-Override", "PUT"}, 428, ""},
		{"header, current token", "/orders/42", []string{"X-HTTP-Method-Override", "PUT", "Fencing-Token", "5"}, 200, ""},
		{"lower case", "/orders/42", []string{"X-HTTP-Method-Override", "put", "Fencing-Token", "3"}, 409, ""},
		{"X-HTTP-Method", "/orders/42", []string{"X-HTTP-Method", "DELETE", "Fencing-Token", "3"}, 409, ""},
		{"X-Method-Override", "/orders/42", []string{"X-Method-Override", "PATCH", "Fencing-Token", "3"}, 409, ""},
		{"configured header", "/orders/42", []string{"X-Verb", "PUT", "Fencing-Token", "3"}, 409, ""},
		{"_method in the query", "/orders/42?_method=PUT", []string{"Fencing-Token", "3"}, 409, ""},
		{"_method encoded", "/orders/42?%5Fmethod=put", []string{"Fencing-Token", "3"}, 409, ""},
		{"_method PHP spelling", "/orders/42?.method=put", []string{"Fencing-Token", "3"}, 409, ""},
		{"_method array", "/orders/42?_method[]=PUT", []string{"Fencing-Token", "3"}, 409, ""},
		{"_method after ;", "/orders/42?a=1;_method=PUT", []string{"Fencing-Token", "3"}, 409, ""},
		{"empty header ignored", "/orders/42", []string{"X-HTTP-Method-Override", "", "Fencing-Token", "3"}, 200, ""},
		{"same method twice", "/orders/42?_method=put", []string{"X-HTTP-Method-Override", "PUT", "Fencing-Token", "3"}, 409, ""},
		{"two different", "/orders/42", []string{"X-HTTP-Method-Override", "PUT", "X-HTTP-Method", "GET", "Fencing-Token", "5"}, 400, "Ambiguous method override"},
		{"header and query differ", "/orders/42?_method=GET", []string{"X-HTTP-Method-Override", "PUT", "Fencing-Token", "5"}, 400, "Ambiguous method override"},
		{"repeated header", "/orders/42", []string{"X-HTTP-Method-Override", "PUT", "X-HTTP-Method-Override", "PUT", "Fencing-Token", "5"}, 400, "Ambiguous method override"},
		{"comma list", "/orders/42", []string{"X-HTTP-Method-Override", "PUT, GET", "Fencing-Token", "5"}, 400, "Ambiguous method override"},
		{"repeated _method", "/orders/42?_method=PUT&_method=PUT", []string{"Fencing-Token", "5"}, 400, "Ambiguous method override"},
		{"not a method", "/orders/42", []string{"X-HTTP-Method-Override", "P UT", "Fencing-Token", "5"}, 400, "Ambiguous method override"},
		{"bad escape in _method", "/orders/42?_method=PU%zzT", []string{"Fencing-Token", "5"}, 400, "Ambiguous method override"},
		{"hop-by-hop override", "/orders/42", []string{"X-HTTP-Method-Override", "PUT", "Connection", "X-HTTP-Method-Override", "Fencing-Token", "5"}, 400, "Ambiguous method override"},
		{"underscore spelling", "/orders/42", []string{"X_HTTP_Method_Override", "PUT", "Fencing-Token", "3"}, 400, "Ambiguous method override"},
		// An override to a method no route fences never unfences the
		// request's own: an app that ignores overrides acts on the POST.
		{"override to an unfenced method", "/jobs/9", []string{"X-HTTP-Method-Override", "GET"}, 428, ""},
		{"override to an unfenced method, stale", "/jobs/9", []string{"X-HTTP-Method-Override", "GET", "Fencing-Token", "3"}, 409, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixtureWith(t, overrideRoutes, nil, func(o *Options) { o.MethodOverrideHeaders = []string{"x-verb"} })
			for _, s := range [][]string{{"PUT", "/orders/42"}, {"POST", "/jobs/9"}} {
				if resp, body := f.do(s[0], s[1], "Fencing-Token", "5"); resp.StatusCode != 200 {
					t.Fatalf("setup %v: %d %s", s, resp.StatusCode, body)
				}
			}
			before := len(f.up.received())
			resp, body := f.sendRaw("POST", tc.target, tc.headers...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			forwarded := f.up.received()[before:]
			if tc.status == 200 {
				if len(forwarded) != 1 || forwarded[0].Method != "POST" {
					t.Fatalf("the app got %+v, want the POST as sent (it applies the override itself)", forwarded)
				}
				return
			}
			if len(forwarded) != 0 {
				t.Fatalf("a refused request reached the app: %+v", forwarded)
			}
			if p := decodeProblem(t, resp, body); tc.title != "" && p.Title != tc.title {
				t.Fatalf("problem %+v, want title %q", p, tc.title)
			}
		})
	}
}

// A method fenced only once upper-cased stays refused under an override to
// an unfenced method: an app that ignores the override upper-cases "post".
func TestMethodCaseUnderOverride(t *testing.T) {
	f := newFixture(t, overrideRoutes, nil)
	resp, body := f.sendRaw("post", "/jobs/9", "X-HTTP-Method-Override", "GET")
	if resp.StatusCode != 400 || !strings.Contains(body, "Method not in upper case") {
		t.Fatalf("%d %s, want 400 Method not in upper case", resp.StatusCode, body)
	}
	if n := len(f.up.received()); n != 0 {
		t.Fatalf("the app got %d requests", n)
	}
}

// The authorization mode reads the override from the original request's
// headers and X-Original-URI's query.
func TestAuthzMethodOverride(t *testing.T) {
	srv, _, _ := authzFixture(t, overrideRoutes, "")
	if resp, body := ask(t, srv, "GET", "/auth", "X-Original-Method", "PUT", "X-Original-URI", "/orders/42", "Fencing-Token", "5"); resp.StatusCode != 200 {
		t.Fatalf("setup: %d %s", resp.StatusCode, body)
	}
	for _, tc := range []struct {
		h      []string
		status int
	}{
		{[]string{"X-Original-Method", "POST", "X-Original-URI", "/orders/42", "X-HTTP-Method-Override", "PUT", "Fencing-Token", "3"}, 409},
		{[]string{"X-Original-Method", "POST", "X-Original-URI", "/orders/42?_method=DELETE", "Fencing-Token", "3"}, 409},
		{[]string{"X-Original-Method", "POST", "X-Original-URI", "/orders/42?_method=DELETE", "X-HTTP-Method", "PUT", "Fencing-Token", "3"}, 400},
		{[]string{"X-Original-Method", "POST", "X-Original-URI", "/orders/42"}, 200},
	} {
		if resp, body := ask(t, srv, "GET", "/auth", tc.h...); resp.StatusCode != tc.status {
			t.Errorf("%v: %d, want %d: %s", tc.h, resp.StatusCode, tc.status, body)
		}
	}
}

// Fence-Decision and Fence-Problem sent by a client never reach the app,
// nor X-Original-URL and X-Rewrite-URL (read as the path by IIS, Symfony
// before 5 and Zend), in any spelling a framework reads as one of them.
func TestReservedHeadersStripped(t *testing.T) {
	f := newFixture(t, ordersRoutes, nil)
	var mu sync.Mutex
	var got []http.Header
	f.up.handle(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		_, _ = io.WriteString(w, "upstream ok")
	})
	sent := []string{"Fence-Decision", "admitted", "Fence-Problem", "{}", "X-Original-URL", "/admin", "X-Rewrite-URL", "/admin",
		"Fence_Decision", "admitted", "x_original_url", "/admin"}
	for _, r := range []struct{ method, target, token string }{
		{"PUT", "/orders/1", "5"}, // admitted
		{"GET", "/orders/1", ""},  // unfenced
		{"GET", "/reports/x", ""}, // a route that does not fence
	} {
		h := sent
		if r.token != "" {
			h = append([]string{"Fencing-Token", r.token}, sent...)
		}
		if resp, body := f.sendRaw(r.method, r.target, h...); resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %s", r.method, r.target, resp.StatusCode, body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("the app got %d requests, want 3", len(got))
	}
	for i, h := range got {
		for k := range h {
			if l := strings.ToLower(strings.ReplaceAll(k, "_", "-")); l == "fence-decision" || l == "fence-problem" || l == "x-original-url" || l == "x-rewrite-url" {
				t.Errorf("request %d reached the app with %s: %v", i, k, h[k])
			}
		}
	}
}

// The authorization mode cannot strip what the asking proxy forwards: a
// question carrying one of these headers is refused (400).
func TestAuthzReservedHeadersRefused(t *testing.T) {
	srv, _, _ := authzFixture(t, ordersRoutes, "")
	for _, h := range []string{"Fence-Decision", "Fence-Problem", "X-Original-URL", "X-Rewrite-URL", "Fence_Decision"} {
		for _, method := range []string{"GET", "PUT"} {
			resp, body := ask(t, srv, "GET", "/auth", "X-Original-Method", method, "X-Original-URI", "/orders/9", "Fencing-Token", "1", h, "x")
			if resp.StatusCode != 400 || !strings.Contains(body, "Reserved header") {
				t.Errorf("%s on a %s: %d %s", h, method, resp.StatusCode, body)
			}
		}
	}
}

// A {query:name} resource is refused when the query holds another spelling
// some framework reads as name: the app could act on the other value.
func TestQueryTwinsRefused(t *testing.T) {
	const routes = `
routes:
  - name: by-query
    methods: [PUT]
    path: /q
    resource: q/{query:order_id}
`
	f := newFixture(t, routes, nil)
	for _, tc := range []struct {
		query  string
		status int
	}{
		{"order_id=1", 200},
		{"order_id=1&other=2", 200},
		{"order_id=1&ORDER_ID=2", 400},   // ASP.NET: case-insensitive keys
		{"order_id=1&order.id=2", 400},   // PHP: '.' is '_'
		{"order_id=1&order+id=2", 400},   // PHP: ' ' is '_'
		{"order_id=1&order_id[]=2", 400}, // PHP, qs: an array named order_id
		{"order_id=1&order_id=2", 400},   // repeated
	} {
		resp, body := f.do("PUT", "/q?"+tc.query, "Fencing-Token", "1")
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d: %s", tc.query, resp.StatusCode, tc.status, body)
		}
	}
}

// A header spelled with '_' for a header the fence reads is refused:
// CGI-style frameworks read Fencing_Token as Fencing-Token, and either
// could win.
func TestUnderscoreHeaderTwinsRefused(t *testing.T) {
	f := newFixture(t, ordersRoutes, nil)
	for _, tc := range []struct {
		target  string
		headers []string
		status  int
	}{
		{"/orders/1", []string{"Fencing-Token", "5", "Fencing_Token", "1"}, 400},
		{"/tenants/items?item=3", []string{"Fencing-Token", "5", "X-Tenant", "a", "X_Tenant", "b"}, 400},
		{"/orders/1", []string{"Fencing-Token", "5", "X_Unrelated", "1"}, 200},
	} {
		resp, body := f.sendRaw("PUT", tc.target, tc.headers...)
		if resp.StatusCode != tc.status {
			t.Errorf("%v: %d, want %d: %s", tc.headers, resp.StatusCode, tc.status, body)
		}
	}
}

// The shipped front-proxy configurations do not ask about reads: the
// authorization mode warns, at start and on every routes reload, about a
// route that fences one, since behind them it would never be fenced.
func TestAuthzWarnsOfFencedReads(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	rs, err := config.ParseRoutes([]byte(`
routes:
  - {name: reads, methods: [GET, PUT], path: '/r/{id}', resource: 'r/{id}'}
  - {name: writes, path: '/w/{id}', resource: 'w/{id}'}
  - {name: open, methods: [GET], path: '/o', fence: false}
`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAuthz(Options{Routes: rs, Store: memstore.New(), Logger: zap.New(core)}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetRoutes(rs); err != nil {
		t.Fatal(err)
	}
	got := logs.FilterMessageSnippet("fences a read method").All()
	if len(got) != 2 {
		t.Fatalf("%d warnings, want one per load of the one route that fences GET: %v", len(got), got)
	}
	if f := got[0].ContextMap(); f["route"] != "reads" {
		t.Fatalf("warning %v, want route reads", f)
	}
}

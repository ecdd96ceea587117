package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
	"github.com/fenceproxy/fenceproxy/internal/wiretest"
)

// The story of the README: A holds token 41 and pauses, B is granted 42 and
// writes, A resumes and writes with 41: refused, and the upstream never sees
// A's late write.
func TestStaleHolderIsFenced(t *testing.T) {
	f := newFixture(t, "", nil)

	if resp, body := f.do("PUT", "/orders/42", "Fencing-Token", "41"); resp.StatusCode != 200 {
		t.Fatalf("A with 41: %d %s", resp.StatusCode, body)
	}
	if resp, body := f.do("PUT", "/orders/42", "Fencing-Token", "42"); resp.StatusCode != 200 {
		t.Fatalf("B with 42: %d %s", resp.StatusCode, body)
	}
	resp, body := f.do("PUT", "/orders/42", "Fencing-Token", "41")
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("A resumes with 41: status %d, want 409 (%s)", resp.StatusCode, body)
	}
	p := decodeProblem(t, resp, body)
	if p.Type != TypeStaleToken || p.Token != "41" || p.HighWaterMark != "42" || p.Resource != "default" {
		t.Fatalf("problem = %+v", p)
	}
	got := f.up.received()
	if len(got) != 2 || got[0].Tokens[0] != "41" || got[1].Tokens[0] != "42" {
		t.Fatalf("upstream received %+v, want exactly the writes of 41 and 42", got)
	}
}

// Every answer of the README's table, with its problem type.
func TestAnswers(t *testing.T) {
	closed := memstore.New()
	_ = closed.Close() // a store that cannot answer: every admission errs

	tests := []struct {
		name     string
		store    fencestore.Store
		setup    [][]string // requests sent first: method, target, header pairs...
		method   string
		target   string
		headers  []string
		status   int
		typ      string // problem type; "" = forwarded
		resource string
	}{
		{name: "admitted", method: "PUT", target: "/orders/1", headers: []string{"Fencing-Token", "5"}, status: 200},
		{name: "stale", setup: [][]string{{"PUT", "/orders/1", "Fencing-Token", "6"}},
			method: "PUT", target: "/orders/1", headers: []string{"Fencing-Token", "5"},
			status: 409, typ: TypeStaleToken, resource: "orders/1"},
		{name: "equal token under >= admitted", setup: [][]string{{"PUT", "/orders/1", "Fencing-Token", "6"}},
			method: "PATCH", target: "/orders/1", headers: []string{"Fencing-Token", "6"}, status: 200},
		{name: "equal token under > stale", setup: [][]string{{"POST", "/jobs/9", "Fencing-Token", "6"}},
			method: "POST", target: "/jobs/9", headers: []string{"Fencing-Token", "6"},
			status: 409, typ: TypeStaleToken, resource: "jobs/9"},
		{name: "token required", method: "DELETE", target: "/orders/1", status: 428, typ: TypeTokenRequired},
		{name: "default rule requires a token", method: "POST", target: "/elsewhere", status: 428, typ: TypeTokenRequired},
		{name: "malformed", method: "PUT", target: "/orders/1", headers: []string{"Fencing-Token", "x"}, status: 400, typ: TypeTokenMalformed},
		{name: "header absent from template", method: "POST", target: "/tenants/items?item=3",
			headers: []string{"Fencing-Token", "1"}, status: 400, typ: TypeBadRequest},
		{name: "query absent from template", method: "POST", target: "/tenants/items",
			headers: []string{"Fencing-Token", "1", "X-Tenant", "acme"}, status: 400, typ: TypeBadRequest},
		{name: "query repeated in template", method: "POST", target: "/tenants/items?item=3&item=4",
			headers: []string{"Fencing-Token", "1", "X-Tenant", "acme"}, status: 400, typ: TypeBadRequest},
		{name: "Connection names a template header", method: "POST", target: "/tenants/items?item=3",
			headers: []string{"Fencing-Token", "1", "X-Tenant", "acme", "Connection", "x-tenant"}, status: 400, typ: TypeBadRequest},
		{name: "template filled", method: "POST", target: "/tenants/items?item=3",
			headers: []string{"Fencing-Token", "1", "X-Tenant", "acme"}, status: 200},
		{name: "ambiguous path", method: "PUT", target: "/orders%2F1", headers: []string{"Fencing-Token", "1"},
			status: 400, typ: TypeBadRequest},
		{name: "store unavailable", store: closed, method: "PUT", target: "/orders/1",
			headers: []string{"Fencing-Token", "1"}, status: 503, typ: TypeStoreUnavailable, resource: "orders/1"},
		{name: "unfenced method", method: "GET", target: "/orders/1", status: 200},
		{name: "unfenced route", method: "POST", target: "/reports/2026/q3", status: 200},
		{name: "optional token absent", method: "PUT", target: "/opt/1", status: 200},
		{name: "optional token present and stale", setup: [][]string{{"PUT", "/opt/1", "Fencing-Token", "9"}},
			method: "PUT", target: "/opt/1", headers: []string{"Fencing-Token", "8"}, status: 409, typ: TypeStaleToken, resource: "opt/1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, ordersRoutes, tc.store)
			for _, s := range tc.setup {
				if resp, body := f.do(s[0], s[1], s[2:]...); resp.StatusCode != 200 {
					t.Fatalf("setup %v: %d %s", s, resp.StatusCode, body)
				}
			}
			before := len(f.up.received())
			resp, body := f.do(tc.method, tc.target, tc.headers...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			forwarded := len(f.up.received()) - before
			if tc.typ == "" {
				if forwarded != 1 || body != "upstream ok" {
					t.Fatalf("forwarded %d requests, body %q; want the upstream's answer", forwarded, body)
				}
				return
			}
			if forwarded != 0 {
				t.Fatalf("a refused request reached the upstream")
			}
			p := decodeProblem(t, resp, body)
			if p.Type != tc.typ {
				t.Fatalf("type %q, want %q", p.Type, tc.typ)
			}
			if tc.resource != "" && p.Resource != tc.resource {
				t.Fatalf("resource %q, want %q", p.Resource, tc.resource)
			}
			if tc.status == 503 && resp.Header.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
		})
	}
}

// Malformed token headers: every spelling is refused with 400 token-malformed
// and nothing is forwarded.
func TestMalformedTokenHeaders(t *testing.T) {
	tests := []struct {
		name    string
		headers []string
	}{
		{"plus sign", []string{"Fencing-Token", "+5"}},
		{"negative", []string{"Fencing-Token", "-1"}},
		{"leading zero", []string{"Fencing-Token", "007"}},
		{"exponent", []string{"Fencing-Token", "1e3"}},
		{"empty", []string{"Fencing-Token", ""}},
		{"comma list", []string{"Fencing-Token", "5, 6"}},
		{"two header lines", []string{"Fencing-Token", "5", "Fencing-Token", "6"}},
		{"two equal header lines", []string{"Fencing-Token", "5", "Fencing-Token", "5"}},
		{"21 digits", []string{"Fencing-Token", "100000000000000000000"}},
		{"2^64", []string{"Fencing-Token", "18446744073709551616"}},
		{"hex", []string{"Fencing-Token", "0x10"}},
		{"inner space", []string{"Fencing-Token", "1 2"}},
		{"Connection names the token", []string{"Fencing-Token", "5", "Connection", "Fencing-Token"}},
		{"Connection names the token among others", []string{"Fencing-Token", "5", "Connection", "keep-alive, fencing-token"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, ordersRoutes, nil)
			resp, body := f.do("PUT", "/orders/1", tc.headers...)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400 (%s)", resp.StatusCode, body)
			}
			if p := decodeProblem(t, resp, body); p.Type != TypeTokenMalformed {
				t.Fatalf("type %q", p.Type)
			}
			if n := len(f.up.received()); n != 0 {
				t.Fatalf("upstream received %d requests", n)
			}
		})
	}
}

// The token's extremes are exact: no floating point anywhere on the path.
func TestTokenExtremes(t *testing.T) {
	f := newFixture(t, ordersRoutes, nil)
	steps := []struct {
		token  string
		status int
	}{
		{"9007199254740993", 200}, // 2^53+1
		{"9007199254740992", 409}, // 2^53: equal as a float64, older as an integer
		{"18446744073709551614", 200},
		{"18446744073709551613", 409},
		{"18446744073709551615", 200}, // 2^64-1
		{"18446744073709551615", 200}, // equal, >=
		{"0", 409},
	}
	for _, s := range steps {
		if resp, body := f.do("PUT", "/orders/7", "Fencing-Token", s.token); resp.StatusCode != s.status {
			t.Fatalf("token %s: %d, want %d (%s)", s.token, resp.StatusCode, s.status, body)
		}
	}
	m, ok, err := f.store.Mark(context.Background(), "orders/7")
	if err != nil || !ok || m != 18446744073709551615 {
		t.Fatalf("mark = %d %v %v", m, ok, err)
	}
}

// Spellings of one path never escape its fence: after token 50 was admitted
// for orders/42, token 41 is refused however the path is written (or the
// spelling is refused as ambiguous), and nothing reaches the upstream.
func TestPathSpellingsStayFenced(t *testing.T) {
	tests := []struct {
		target string
		status int
	}{
		{"/orders/42", 409},
		{"/orders/42/", 409},
		{"/orders//42", 409},
		{"//orders/42", 409},
		{"/./orders/42", 409},
		{"/orders/x/../42", 409},
		{"/orders/%34%32", 409},
		{"/%6Frders/42", 409},
		{"/orders/42/.", 409},
		{"/orders/%2e/42", 409},
		{"/orders%2F42", 400},
		{"/orders%2f42", 400},
		{"/orders/42;x=1", 400},
		{"/orders/42%3Bx=1", 400},
		{"/orders%5C42", 400},
		{"/orders/42%00", 400},
	}
	f := newFixture(t, ordersRoutes, nil)
	if resp, body := f.do("PUT", "/orders/42", "Fencing-Token", "50"); resp.StatusCode != 200 {
		t.Fatalf("setup: %d %s", resp.StatusCode, body)
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			before := len(f.up.received())
			resp, body := f.do("PUT", tc.target, "Fencing-Token", "41")
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.status, body)
			}
			p := decodeProblem(t, resp, body)
			if tc.status == 409 && p.Resource != "orders/42" {
				t.Fatalf("fenced as %q, want orders/42", p.Resource)
			}
			if n := len(f.up.received()) - before; n != 0 {
				t.Fatalf("upstream received %d requests", n)
			}
		})
	}
}

// What was fenced is what the upstream serves: it receives the canonical
// path (a trailing slash kept as sent), the query, the client's Host, and the
// token header exactly once.
func TestForwardedRequest(t *testing.T) {
	tests := []struct {
		target, path, query string
	}{
		{"/orders/%34%32?x=1", "/orders/42", "x=1"},
		{"/orders//42/", "/orders/42/", ""},
		{"/a/../orders/./42", "/orders/42", ""},
		{"/orders/caf%C3%A9", "/orders/café", ""},
	}
	for _, tc := range tests {
		t.Run(tc.target, func(t *testing.T) {
			f := newFixture(t, ordersRoutes, nil)
			resp, body := f.do("PUT", tc.target, "Fencing-Token", "3", "Host", "orders.example")
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			got := f.up.received()
			if len(got) != 1 {
				t.Fatalf("received %d", len(got))
			}
			r := got[0]
			if r.Path != tc.path || r.Query != tc.query || r.Host != "orders.example" ||
				len(r.Tokens) != 1 || r.Tokens[0] != "3" || r.Body != "payload" {
				t.Fatalf("upstream got %+v, want path %q query %q token [3]", r, tc.path, tc.query)
			}
		})
	}
}

// A body is streamed: the upstream reads its first part before the client
// has finished sending, which a buffering proxy could not allow.
func TestBodyIsStreamed(t *testing.T) {
	firstPart := make(chan string, 1)
	f := newFixture(t, "", nil)
	f.up.handle(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 5)
		_, _ = io.ReadFull(r.Body, buf)
		firstPart <- string(buf)
		_, _ = io.Copy(io.Discard, r.Body)
	})

	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", f.front.URL+"/stream", pr)
	req.Header.Set("Fencing-Token", "1")
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := f.front.Client().Do(req)
		if err != nil {
			t.Error(err)
			close(done)
			return
		}
		done <- resp
	}()
	_, _ = pw.Write([]byte("hello"))
	select {
	case got := <-firstPart:
		if got != "hello" {
			t.Fatalf("first part %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream did not see the first part while the body was still open: buffered")
	}
	_, _ = pw.Write([]byte(" world"))
	_ = pw.Close()
	if resp := <-done; resp != nil {
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// An upstream that does not answer gives 502 after admission.
func TestUpstreamDown(t *testing.T) {
	f := newFixture(t, "", nil)
	f.up.Close()
	resp, body := f.do("PUT", "/x", "Fencing-Token", "1")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d (%s)", resp.StatusCode, body)
	}
	if !strings.Contains(body, "upstream") {
		t.Fatalf("body %q", body)
	}
}

// Framing the README describes: conflicting Content-Length values are
// refused before fenceproxy runs, and a request with both Content-Length and
// Transfer-Encoding reaches the upstream framed once, chunked, without the
// Content-Length it came with.
func TestRequestFraming(t *testing.T) {
	f := newFixture(t, "", nil)
	var gotCL []string
	var gotTE []string
	f.up.handle(func(w http.ResponseWriter, r *http.Request) {
		gotCL, gotTE = r.Header["Content-Length"], r.TransferEncoding
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	send := func(raw string) string {
		t.Helper()
		c := wiretest.Write(t, f.front.URL, raw)
		defer c.Close()
		resp, err := wiretest.Answer(c, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Status + " " + string(b)
	}
	if got := send("PUT /x HTTP/1.1\r\nHost: a\r\nFencing-Token: 1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"); !strings.HasPrefix(got, "400") {
		t.Fatalf("conflicting lengths: %s", got)
	}
	if n := len(f.up.received()); n != 0 {
		t.Fatalf("upstream received %d requests", n)
	}
	got := send("PUT /x HTTP/1.1\r\nHost: a\r\nFencing-Token: 2\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	if got != "200 OK hello" || gotCL != nil || len(gotTE) != 1 || gotTE[0] != "chunked" {
		t.Fatalf("CL+TE: answer %q, upstream saw Content-Length %q Transfer-Encoding %q", got, gotCL, gotTE)
	}
}

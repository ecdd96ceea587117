package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/fenceproxy/fenceproxy/internal/upstream"
	"github.com/fenceproxy/fenceproxy/internal/wiretest"
)

// scriptedUpstream is a raw HTTP/1.1 upstream: it records the bytes of
// every request it reads and answers each with the current script.
type scriptedUpstream struct {
	ln     net.Listener
	mu     sync.Mutex
	answer string // raw bytes; "CLOSE" at the end: close the connection after them
	got    []string
}

func newScriptedUpstream(t *testing.T) *scriptedUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &scriptedUpstream{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

func (u *scriptedUpstream) serve(c net.Conn) {
	defer c.Close()
	var raw bytes.Buffer
	br := bufio.NewReader(io.TeeReader(c, &raw))
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		u.mu.Lock()
		u.got = append(u.got, raw.String())
		answer := u.answer
		u.mu.Unlock()
		raw.Reset()
		closeAfter := strings.HasSuffix(answer, "CLOSE")
		_, _ = io.WriteString(c, strings.TrimSuffix(answer, "CLOSE"))
		if closeAfter {
			return
		}
	}
}

func (u *scriptedUpstream) script(answer string) {
	u.mu.Lock()
	u.answer, u.got = answer, nil
	u.mu.Unlock()
}

func (u *scriptedUpstream) received() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.got)
}

// seen is what one client saw of an exchange, and what the upstream got.
type seen struct {
	upstream []string
	status   int
	header   http.Header
	body     string
	bodyErr  bool
	trailer  http.Header
}

// madeIDs matches generated request ids wherever they appear; each
// path makes its own.
var madeIDs = regexp.MustCompile(`\b[0-9a-f]{16}\b`)

func normalise(s string) string { return madeIDs.ReplaceAllString(s, "<id>") }

// exchangeRaw sends raw to front and reads the answer (every 1xx first).
func exchangeRaw(t *testing.T, front, raw string, up *scriptedUpstream) seen {
	t.Helper()
	c := wiretest.Write(t, front, raw)
	defer c.Close()
	br := bufio.NewReader(c)
	var s seen
	var hints []string
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: raw[:strings.IndexByte(raw, ' ')]})
		if err != nil {
			s.status, s.body, s.header = 0, "no answer: "+err.Error(), http.Header{}
			break
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			hints = append(hints, resp.Status+" "+resp.Header.Get("Link"))
			continue
		}
		b, err := io.ReadAll(resp.Body)
		s.status, s.body, s.bodyErr, s.trailer = resp.StatusCode, normalise(string(b)), err != nil, resp.Trailer
		s.header = resp.Header
		break
	}
	s.header.Del("Date")
	for k, vv := range s.header {
		for i := range vv {
			vv[i] = normalise(vv[i])
		}
		s.header[k] = vv
	}
	if hints != nil {
		s.header["Test-Hints"] = hints
	}
	for _, r := range up.received() {
		s.upstream = append(s.upstream, normalise(r))
	}
	return s
}

// TestDirectMatchesReverseProxy holds the direct path to ReverseProxy's:
// each request goes once through a forwarder (direct when the request is
// common) and once through its ReverseProxy alone, to the same scripted
// upstream; the upstream must receive the same bytes (the request id
// aside, each path making its own) and the client the same answer.
func TestDirectMatchesReverseProxy(t *testing.T) {
	up := newScriptedUpstream(t)
	upURL, _ := url.Parse("http://" + up.ln.Addr().String() + "/base")
	tr := upstream.New(upstream.Options{})
	t.Cleanup(tr.CloseIdleConnections)
	f := newForwarder(upURL, tr, zap.NewNop(), NewMetrics().forRoute("r", false), "r")
	var tookDirect bool
	both := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tookDirect = direct(r)
		f.ServeHTTP(w, r)
	}))
	defer both.Close()
	rpOnly := httptest.NewServer(f.rp)
	defer rpOnly.Close()

	// Every answer that streams names its Content-Type: whether net/http
	// sniffs a missing one depends, on either path, on whether the first
	// body bytes come before the flush timer fires.
	const ok5 = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello"
	const put = "PUT /o/1 HTTP/1.1\r\nHost: svc.local\r\nX-Request-Id: client-id-1\r\nContent-Length: 20\r\n\r\n0123456789abcdefghij"
	tests := []struct {
		name       string
		req        string // raw, to the front
		answer     string // raw, from the upstream
		wantDirect bool
	}{
		{"GET, plain answer", "GET /a?x=1&y=%41 HTTP/1.1\r\nHost: svc.local\r\nUser-Agent: t/1\r\nX-Request-Id: c1\r\n\r\n", ok5, true},
		{"PUT with a body, client's forwarding headers dropped, no User-Agent", "PUT /o/1 HTTP/1.1\r\nHost: svc.local\r\nX-Forwarded-For: 6.6.6.6\r\n" +
			"Forwarded: for=6.6.6.6\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Proto: https\r\nX-Multi: a\r\nX-Multi: b\r\nX-Empty:\r\nContent-Length: 3\r\n\r\nabc",
			"HTTP/1.1 204 No Content\r\nX-Up: 1\r\n\r\n", true},
		{"no request id: one made", "GET /n HTTP/1.1\r\nHost: svc.local\r\n\r\n", ok5, true},
		{"hop-by-hop headers of the answer stripped", put,
			"HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: x\r\nUpgrade: foo\r\nX-Keep: y\r\n" +
				"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 2\r\n\r\nok", true},
		{"chunked answer, trailers announced", put,
			"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-Sum: 5\r\n\r\n", true},
		{"chunked answer, trailers not announced", put,
			"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Late: 1\r\n\r\n", true},
		{"event stream", put,
			"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nContent-Length: 12\r\n\r\ndata: one\n\n\n", true},
		{"answer of unknown length", put, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil closeCLOSE", true},
		{"103 Early Hints first", put,
			"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" + ok5, true},
		{"HEAD", "HEAD /h HTTP/1.1\r\nHost: svc.local\r\nX-Request-Id: c2\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true},
		{"answer cut short", put, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhelCLOSE", true},
		{"unasked 101", put, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", true},
		{"no answer at all", put, "CLOSE", true},
		// Not common: ReverseProxy on both sides (the same answer, trivially,
		// but the choice is checked).
		{"Connection header", "GET /c HTTP/1.1\r\nHost: svc.local\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nX-Request-Id: c3\r\n\r\n", ok5, false},
		{"Te: trailers", "GET /c HTTP/1.1\r\nHost: svc.local\r\nTe: trailers\r\nX-Request-Id: c3\r\n\r\n", ok5, false},
		{"query with ;", "GET /c?a=1;b=2 HTTP/1.1\r\nHost: svc.local\r\nX-Request-Id: c3\r\n\r\n", ok5, false},
		{"10,001 query parameters", "GET /c?" + strings.Repeat("a=1&", 10000) + "a=1 HTTP/1.1\r\nHost: svc.local\r\nX-Request-Id: c3\r\n\r\n", ok5, false},
		{"query with a stray %", "GET /c?a=%zz HTTP/1.1\r\nHost: svc.local\r\nX-Request-Id: c3\r\n\r\n", ok5, false},
		{"chunked body", "POST /c HTTP/1.1\r\nHost: svc.local\r\nTransfer-Encoding: chunked\r\nX-Request-Id: c3\r\n\r\n3\r\nabc\r\n0\r\n\r\n", ok5, false},
		{"Expect", "PUT /c HTTP/1.1\r\nHost: svc.local\r\nExpect: 100-continue\r\nContent-Length: 3\r\nX-Request-Id: c3\r\n\r\nabc", ok5, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up.script(tc.answer)
			got := exchangeRaw(t, both.URL, tc.req, up)
			if tookDirect != tc.wantDirect {
				t.Fatalf("direct path taken: %v, want %v", tookDirect, tc.wantDirect)
			}
			up.script(tc.answer)
			want := exchangeRaw(t, rpOnly.URL, tc.req, up)
			if len(want.upstream) == 0 && tc.answer != "CLOSE" {
				t.Fatal("the upstream received nothing")
			}
			if !slices.Equal(got.upstream, want.upstream) {
				t.Errorf("upstream received\n%q\nthrough ReverseProxy\n%q", got.upstream, want.upstream)
			}
			if got.status != want.status || got.body != want.body || got.bodyErr != want.bodyErr {
				t.Errorf("answer %d %q (body error %v), through ReverseProxy %d %q (%v)",
					got.status, got.body, got.bodyErr, want.status, want.body, want.bodyErr)
			}
			if !headersEqual(got.header, want.header) || !headersEqual(got.trailer, want.trailer) {
				t.Errorf("header %v trailer %v\nthrough ReverseProxy: header %v trailer %v", got.header, got.trailer, want.header, want.trailer)
			}
		})
	}
}

// headersEqual compares two headers, a "Trailer" list in any order.
func headersEqual(a, b http.Header) bool {
	sorted := func(h http.Header) http.Header {
		h = h.Clone()
		if v := h.Get("Trailer"); v != "" {
			names := strings.Split(v, ", ")
			slices.Sort(names)
			h.Set("Trailer", strings.Join(names, ", "))
		}
		return h
	}
	a, b = sorted(a), sorted(b)
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// isEventStream decides as ReverseProxy's mime.ParseMediaType does.
func FuzzIsEventStream(f *testing.F) {
	for _, ct := range []string{"text/event-stream", "TEXT/Event-Stream; charset=utf-8", " text/event-stream ",
		"text/event-streams", "text/event-ſtream", "text/plain", "", ";", "text/event-stream;;", "text/event-stream; a",
		"\ttext/event-stream\u00a0", "text/\u212aevent-stream"} {
		f.Add(ct)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		mt, _, _ := mime.ParseMediaType(ct)
		if got, want := isEventStream(ct), mt == "text/event-stream"; got != want {
			t.Fatalf("isEventStream(%q) = %v, mime.ParseMediaType says %q", ct, got, mt)
		}
	})
}

// stubTransport answers every request with answer, keeping the request
// (its body unread) for the test to look at after the forward.
type stubTransport struct {
	answer func(*http.Request) *http.Response
	kept   *http.Request
}

func (s *stubTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	s.kept = r
	resp := s.answer(r)
	resp.Request = r
	return resp, nil
}

// Forwards through a RoundTripper of another kind than fenceproxy's: a 101
// nobody asked for is a 502 on both paths (the inline transport refuses it
// before the forwarder sees it), and a body the transport would still read
// after the forward ended reads nothing, as with ReverseProxy.
func TestDirectThroughOtherTransports(t *testing.T) {
	up, _ := url.Parse("http://127.0.0.1:1")
	switching := func(*http.Request) *http.Response {
		return &http.Response{StatusCode: http.StatusSwitchingProtocols, ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}, Body: http.NoBody}
	}
	tr := &stubTransport{answer: switching}
	f := newForwarder(up, tr, zap.NewNop(), NewMetrics().forRoute("r", false), "r")
	for name, h := range map[string]http.Handler{"direct": f, "ReverseProxy": f.rp} {
		r := httptest.NewRequest("GET", "/x", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusBadGateway {
			t.Errorf("%s: an unasked 101 answered %d, want 502", name, w.Code)
		}
	}

	tr.answer = func(*http.Request) *http.Response {
		return &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, Body: http.NoBody}
	}
	r := httptest.NewRequest("PUT", "/x", strings.NewReader("body"))
	if !direct(r) {
		t.Fatal("the request does not take the direct path")
	}
	f.ServeHTTP(httptest.NewRecorder(), r)
	if n, err := tr.kept.Body.Read(make([]byte, 8)); !errors.Is(err, errBodyAfterForward) {
		t.Errorf("a read of the body after the forward = %d, %v; want %v", n, err, errBodyAfterForward)
	}
}

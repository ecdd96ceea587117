package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/wiretest"
)

func TestInlineChoosesPath(t *testing.T) {
	body := func(n int) io.ReadCloser { return io.NopCloser(strings.NewReader(strings.Repeat("x", n))) }
	tests := []struct {
		name   string
		mutate func(r *http.Request)
		want   bool
	}{
		{"small PUT", func(r *http.Request) {}, true},
		{"no body", func(r *http.Request) { r.Body, r.ContentLength = nil, 0 }, true},
		{"NoBody", func(r *http.Request) { r.Body, r.ContentLength = http.NoBody, 0 }, true},
		{"64 KiB body", func(r *http.Request) { r.Body, r.ContentLength = body(MaxInlineBody), MaxInlineBody }, true},
		{"64 KiB + 1 body", func(r *http.Request) { r.Body, r.ContentLength = body(MaxInlineBody+1), MaxInlineBody+1 }, false},
		{"length unknown", func(r *http.Request) { r.ContentLength = -1 }, false},
		{"body with length 0 is unknown length", func(r *http.Request) { r.ContentLength = 0 }, false},
		{"chunked", func(r *http.Request) { r.TransferEncoding = []string{"chunked"} }, false},
		{"trailer", func(r *http.Request) { r.Trailer = http.Header{"X-Sum": nil} }, false},
		{"Expect", func(r *http.Request) { r.Header.Set("Expect", "100-continue") }, false},
		{"Upgrade", func(r *http.Request) { r.Header.Set("Connection", "Upgrade"); r.Header.Set("Upgrade", "websocket") }, false},
		{"https upstream", func(r *http.Request) { r.URL.Scheme = "https" }, false},
		{"CONNECT", func(r *http.Request) { r.Method = http.MethodConnect }, false},
		// What http.Transport refuses, it refuses with its own error.
		{"nil URL", func(r *http.Request) { r.URL = nil }, false},
		{"nil Header", func(r *http.Request) { r.Header = nil }, false},
		{"no host", func(r *http.Request) { r.URL.Host = "" }, false},
		{"method not a token", func(r *http.Request) { r.Method = "PUT /x HTTP/1.1\r\nX:" }, false},
		{"header name not a token", func(r *http.Request) { r.Header["X\r\nInjected"] = []string{"1"} }, false},
		{"empty header name", func(r *http.Request) { r.Header[""] = []string{"1"} }, false},
		{"line break in a header value", func(r *http.Request) { r.Header["X-A"] = []string{"1\r\nInjected: 1"} }, false},
		{"tab in a header value", func(r *http.Request) { r.Header["X-A"] = []string{"1\t2"} }, true},
		{"empty method is GET", func(r *http.Request) { r.Method = "" }, true},
		// The deprecated Cancel channel is watched by http.Transport.
		{"Request.Cancel", func(r *http.Request) { r.Cancel = make(chan struct{}) }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := http.NewRequest("PUT", "http://127.0.0.1:1/x", strings.NewReader("payload"))
			tc.mutate(r)
			if got := inline(r); got != tc.want {
				t.Fatalf("inline = %v, want %v", got, tc.want)
			}
		})
	}
}

// On the inline path each write checks the deadline by the clock, and
// fails with the configured error.
func TestInlineWriteChecksDeadline(t *testing.T) {
	mine := errors.New("mine")
	c := &upConn{sendBy: time.Now().Add(-time.Millisecond), pastDeadline: mine}
	if _, err := c.Write([]byte("x")); err != mine {
		t.Fatalf("write past the deadline = %v", err)
	}
}

// A request whose deadline has passed by the clock is not sent, on either
// path, even when its context has not noticed yet; the error is the
// configured one, marked as not sent, and the body is closed.
func TestPastDeadlineNotSent(t *testing.T) {
	up := newConnUpstream(t, echoBody)
	mine := errors.New("mine")
	tr := New(Options{PastDeadline: mine})
	t.Cleanup(tr.CloseIdleConnections)
	ctx := frozenCtx{Context: context.Background(), d: time.Now().Add(-time.Millisecond)}
	for _, size := range []int{7, MaxInlineBody + 1} {
		body := &closeRecorder{Reader: strings.NewReader(strings.Repeat("x", size))}
		req, _ := http.NewRequestWithContext(ctx, "PUT", up.URL+"/x", body)
		req.ContentLength = int64(size)
		_, err := tr.RoundTrip(req)
		var ns *NotSentError
		if !errors.Is(err, mine) || !errors.As(err, &ns) {
			t.Fatalf("%d bytes: %v, want a not-sent %v", size, err, mine)
		}
		if !body.closed.Load() {
			t.Fatalf("%d bytes: the request body was not closed", size)
		}
	}
	if n := up.opened.Load(); n != 0 {
		t.Fatalf("the upstream saw %d connections", n)
	}
	if err := (&NotSentError{Err: ErrPastDeadline}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v does not wrap context.DeadlineExceeded", err)
	}
}

// frozenCtx has a deadline that has passed by the clock, but whose timer
// has not fired: the state of a process that resumes after a freeze.
type frozenCtx struct {
	context.Context
	d time.Time
}

func (c frozenCtx) Deadline() (time.Time, bool) { return c.d, true }

// closeRecorder is a request body that records whether it was closed.
type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (b *closeRecorder) Close() error {
	b.closed.Store(true)
	return nil
}

// connUpstream is an upstream that counts the connections it accepts and
// closes.
type connUpstream struct {
	*httptest.Server
	opened, closed atomic.Int64
	closedc        chan struct{} // one value per closed connection
}

func newConnUpstream(t *testing.T, h http.HandlerFunc) *connUpstream {
	t.Helper()
	u := &connUpstream{closedc: make(chan struct{}, 1024)}
	u.Server = httptest.NewUnstartedServer(h)
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			u.opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			u.closed.Add(1)
			u.closedc <- struct{}{}
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// frontOf puts an httputil.ReverseProxy over a new Transport in front of
// up, as a proxy plugs it in, and returns the front's URL and the
// transport.
func frontOf(t *testing.T, up string) (*httptest.Server, *Transport) {
	t.Helper()
	u, _ := url.Parse(up)
	tr := New(Options{})
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport: tr,
		ErrorLog:  log.New(io.Discard, "", 0), // the failures are the tests' own
	}
	front := httptest.NewServer(rp)
	t.Cleanup(func() {
		front.Close()
		tr.CloseIdleConnections()
	})
	return front, tr
}

// put sends a PUT with body and returns status and response body.
func put(t *testing.T, c *http.Client, front, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("PUT", front+path, strings.NewReader(body))
	resp, b := wiretest.Send(t, c, req)
	return resp.StatusCode, b
}

func echoBody(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	_, _ = w.Write(append([]byte(r.Method+" "), b...))
}

// Sequential requests share one upstream connection: the inline path
// returns a connection to the pool once its response is read.
func TestConnectionReuse(t *testing.T) {
	up := newConnUpstream(t, echoBody)
	front, _ := frontOf(t, up.URL)
	for i := 1; i <= 50; i++ {
		body := strings.Repeat("b", i*100)
		code, got := put(t, front.Client(), front.URL, "/r", body)
		if code != 200 || got != "PUT "+body {
			t.Fatalf("request %d: %d %.40q", i, code, got)
		}
	}
	if n := up.opened.Load(); n != 1 {
		t.Fatalf("the upstream accepted %d connections for 50 sequential requests, want 1", n)
	}
}

// An idle connection the upstream closed is noticed before it is used: the
// next PUT (which, having a body, could not be sent twice) goes out on a new
// connection instead of failing.
func TestClosedIdleConnection(t *testing.T) {
	up := newConnUpstream(t, echoBody)
	front, _ := frontOf(t, up.URL)
	if code, _ := put(t, front.Client(), front.URL, "/r", "one"); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	up.CloseClientConnections()
	<-up.closedc // the upstream has closed its end: its FIN is on the way
	for i := 2; i <= 5; i++ {
		if code, body := put(t, front.Client(), front.URL, "/r", "again"); code != 200 || body != "PUT again" {
			t.Fatalf("request %d after the upstream closed the idle connection: %d %q", i, code, body)
		}
	}
	if n := up.opened.Load(); n != 2 {
		t.Fatalf("upstream connections = %d, want 2", n)
	}
}

// Response shapes that end an exchange differently: each is read whole and
// the connection is reused only when its framing allows.
func TestResponseFraming(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		h         http.HandlerFunc
		wantBody  string
		wantCode  int
		wantConns int64 // for three requests
	}{
		{"content-length", "PUT", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "sized") }, "sized", 200, 1},
		{"chunked", "PUT", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "part1,")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "part2")
		}, "part1,part2", 200, 1},
		{"no content", "PUT", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }, "", 204, 1},
		{"not modified", "PUT", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(304) }, "", 304, 1},
		{"HEAD", "HEAD", func(w http.ResponseWriter, r *http.Request) { w.Header().Set("Content-Length", "100") }, "", 200, 1},
		{"Connection: close", "PUT", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		}, "bye", 200, 3},
		{"close-delimited", "PUT", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			c, bw, err := w.(http.Hijacker).Hijack()
			if err != nil {
				panic(err)
			}
			_, _ = bw.WriteString("HTTP/1.1 200 OK\r\n\r\nuntil the end")
			_ = bw.Flush()
			_ = c.Close()
		}, "until the end", 200, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := newConnUpstream(t, tc.h)
			front, _ := frontOf(t, up.URL)
			for i := 1; i <= 3; i++ {
				req, _ := http.NewRequest(tc.method, front.URL+"/r", strings.NewReader("payload"))
				resp, b := wiretest.Send(t, front.Client(), req)
				if resp.StatusCode != tc.wantCode || b != tc.wantBody {
					t.Fatalf("request %d: %d %q, want %d %q", i, resp.StatusCode, b, tc.wantCode, tc.wantBody)
				}
			}
			if n := up.opened.Load(); n != tc.wantConns {
				t.Fatalf("upstream connections = %d, want %d", n, tc.wantConns)
			}
		})
	}
}

// An informational response reaches the client before the final one, as
// with http.Transport.
func TestEarlyHints(t *testing.T) {
	up := newConnUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		_, _ = io.WriteString(w, "final")
	})
	front, _ := frontOf(t, up.URL)
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, strconv.Itoa(code)+" "+h.Get("Link"))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "PUT", front.URL+"/r", strings.NewReader("x"))
	resp, b := wiretest.Send(t, front.Client(), req)
	if resp.StatusCode != 200 || b != "final" {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	if len(hints) != 1 || hints[0] != "103 </style.css>; rel=preload" {
		t.Fatalf("informational responses seen by the client: %q", hints)
	}
}

// A client that leaves while the upstream is still working cancels the
// exchange: the upstream connection is closed (the upstream's request
// context ends), and the handler returns (goleak checks in TestMain).
func TestClientCancel(t *testing.T) {
	started := make(chan struct{})
	cancelled := make(chan struct{})
	up := newConnUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		// net/http watches for the connection to close only once the
		// request body is read.
		_, _ = io.ReadAll(r.Body)
		close(started)
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(15 * time.Second): // let the test fail rather than hang
		}
	})
	front, _ := frontOf(t, up.URL)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "PUT", front.URL+"/r", strings.NewReader("x"))
	errc := wiretest.Async(front.Client(), req)
	<-started
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream never saw its connection close after the client left")
	}
}

// A response body the client stops reading drops its upstream connection
// (it is in the middle of a response); the next request is served whole.
func TestBodyAbandoned(t *testing.T) {
	big := strings.Repeat("z", 4<<20)
	up := newConnUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			_, _ = io.WriteString(w, big)
			return
		}
		_, _ = io.WriteString(w, "small")
	})
	front, _ := frontOf(t, up.URL)
	req, _ := http.NewRequest("PUT", front.URL+"/big", strings.NewReader("x"))
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // the Go client closes this connection to the front
	<-up.closedc      // so the front's write fails, and it drops the upstream connection
	if code, body := put(t, front.Client(), front.URL, "/small", "x"); code != 200 || body != "small" {
		t.Fatalf("next request: %d %q", code, body)
	}
}

// The pool keeps at most MaxIdlePerHost connections; the rest are closed
// when their exchange ends.
func TestPoolBounded(t *testing.T) {
	const concurrent = 6
	var arrived sync.WaitGroup
	arrived.Add(concurrent)
	up := newConnUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		arrived.Wait() // every request holds its connection at once
		_, _ = io.WriteString(w, "ok")
	})
	front, tr := frontOf(t, up.URL)
	tr.maxIdle = 2
	var wg sync.WaitGroup
	for i := range concurrent {
		wg.Go(func() {
			if code, _ := put(t, front.Client(), front.URL, "/r"+strconv.Itoa(i), "x"); code != 200 {
				t.Errorf("status %d", code)
			}
		})
	}
	wg.Wait()
	for range concurrent - 2 {
		<-up.closedc
	}
	if opened, idle := up.opened.Load(), idleCount(tr); opened != concurrent || idle != 2 {
		t.Fatalf("opened %d, idle %d; want %d opened, 2 idle", opened, idle, concurrent)
	}
}

func idleCount(tr *Transport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, conns := range tr.idle {
		n += len(conns)
	}
	return n
}

// What the inline path does not take still works through http.Transport:
// large and unknown-length bodies, 100-continue and protocol upgrades.
func TestFallback(t *testing.T) {
	up := newConnUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "echo" {
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Upgrade", "echo")
			w.WriteHeader(http.StatusSwitchingProtocols)
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			line, _ := brw.ReadString('\n')
			_, _ = brw.WriteString("echo: " + line)
			_ = brw.Flush()
			return
		}
		echoBody(w, r)
	})
	front, _ := frontOf(t, up.URL)

	big := strings.Repeat("B", MaxInlineBody+1)
	if code, body := put(t, front.Client(), front.URL, "/big", big); code != 200 || body != "PUT "+big {
		t.Fatalf("large body: %d, %d bytes back", code, len(body))
	}

	req, _ := http.NewRequest("PUT", front.URL+"/unknown", io.MultiReader(strings.NewReader("no "), strings.NewReader("length")))
	req.Header.Set("Expect", "100-continue")
	resp, b := wiretest.Send(t, front.Client(), req)
	if resp.StatusCode != 200 || b != "PUT no length" {
		t.Fatalf("chunked with 100-continue: %d %q", resp.StatusCode, b)
	}

	c, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "GET /up HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	_, _ = io.WriteString(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
		t.Fatalf("upgraded stream: %q %v", line, err)
	}
}

// Trailers of a chunked response reach the client after the body, and the
// connection is reused afterwards (the trailer section ends the response).
func TestResponseTrailers(t *testing.T) {
	up := newConnUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "abc")
	})
	front, _ := frontOf(t, up.URL)
	for i := 1; i <= 2; i++ {
		req, _ := http.NewRequest("PUT", front.URL+"/r", strings.NewReader("x"))
		resp, b := wiretest.Send(t, front.Client(), req)
		if resp.StatusCode != 200 || b != "body" || resp.Trailer.Get("X-Checksum") != "abc" {
			t.Fatalf("request %d: %d %q trailer %v", i, resp.StatusCode, b, resp.Trailer)
		}
	}
	if n := up.opened.Load(); n != 1 {
		t.Fatalf("upstream connections = %d, want 1", n)
	}
}

// Connections idle for the idle timeout are closed without waiting for the
// next request.
func TestIdleTimeout(t *testing.T) {
	up := newConnUpstream(t, echoBody)
	front, tr := frontOf(t, up.URL)
	tr.idleTimeout = 50 * time.Millisecond
	if code, _ := put(t, front.Client(), front.URL, "/r", "x"); code != 200 {
		t.Fatalf("status %d", code)
	}
	select {
	case <-up.closedc:
	case <-time.After(10 * time.Second):
		t.Fatal("an idle upstream connection stayed open past the idle timeout")
	}
	if code, _ := put(t, front.Client(), front.URL, "/r", "x"); code != 200 {
		t.Fatalf("after the sweep: status %d", code)
	}
	if n := up.opened.Load(); n != 2 {
		t.Fatalf("upstream connections = %d, want 2", n)
	}
}

// An upstream that answers with something that is not an HTTP response, or
// with a 101 nobody asked for, gets the front's client a 502; its
// connection is dropped, and the next request is served on a new one.
func TestMalformedResponse(t *testing.T) {
	tests := []struct{ name, raw string }{
		{"not HTTP", "garbage\r\n\r\n"},
		{"bad status code", "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n"},
		{"unasked 101", "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n"},
		{"header without colon", "HTTP/1.1 200 OK\r\nbroken header\r\nContent-Length: 0\r\n\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			up := newConnUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) > 1 {
					echoBody(w, r)
					return
				}
				_, _ = io.ReadAll(r.Body)
				c, bw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = bw.WriteString(tc.raw)
				_ = bw.Flush()
			})
			front, _ := frontOf(t, up.URL)
			if code, body := put(t, front.Client(), front.URL, "/r", "x"); code != http.StatusBadGateway {
				t.Fatalf("%d %q, want 502", code, body)
			}
			if code, body := put(t, front.Client(), front.URL, "/r", "y"); code != 200 || body != "PUT y" {
				t.Fatalf("next request: %d %q", code, body)
			}
		})
	}
}

// hintsSeen is an Informational that records what it is given, and fails
// with err when set.
type hintsSeen struct {
	hints []string
	err   error
}

func (h *hintsSeen) Informational(code int, hdr textproto.MIMEHeader) error {
	h.hints = append(h.hints, strconv.Itoa(code)+" "+hdr.Get("Link"))
	return h.err
}

// RoundTripInformational gives the informational responses to its
// Informational on the inline path (a small body; not to the request's
// trace) and on http.Transport's (a body past MaxInlineBody); an error from
// it ends the exchange with that error.
func TestRoundTripInformational(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		_, _ = io.WriteString(w, "final")
	}))
	defer up.Close()
	tr := New(Options{})
	errRefused := errors.New("refused by the caller")
	for _, tc := range []struct {
		name  string
		body  int
		err   error
		trace bool // the request has a trace too (http.Transport would call both)
	}{
		{"inline", 1, nil, true},
		{"http.Transport", MaxInlineBody + 1, nil, false},
		{"inline, refused", 1, errRefused, true},
		{"http.Transport, refused", MaxInlineBody + 1, errRefused, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var traced int
			ctx := context.Background()
			if tc.trace {
				ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
					Got1xxResponse: func(int, textproto.MIMEHeader) error { traced++; return nil }})
			}
			req, _ := http.NewRequestWithContext(ctx, "PUT", up.URL+"/r", strings.NewReader(strings.Repeat("x", tc.body)))
			info := &hintsSeen{err: tc.err}
			resp, err := tr.RoundTripInformational(req, info)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err = %v, want %v", err, tc.err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != "final" {
					t.Fatalf("%d %q", resp.StatusCode, b)
				}
			}
			if len(info.hints) != 1 || info.hints[0] != "103 </style.css>; rel=preload" || traced != 0 {
				t.Fatalf("informational responses: %q to the Informational, %d to the trace", info.hints, traced)
			}
		})
	}
}

package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
	"github.com/fenceproxy/fenceproxy/internal/upstream"

	"github.com/fenceproxy/fenceproxy/internal/wiretest"
)

// The forward as the proxy's: what a client is told when the upstream
// fails. The transport itself is tested in internal/upstream.

const (
	detailNotSent = "the upstream could not be reached: the request was admitted but not sent to it"
	detailMaybe   = "the upstream did not answer: the request was admitted and may or may not have reached it"
	// The request's own upstream deadline (FENCE_UPSTREAM_TIMEOUT).
	detailDeadline = "the request's upstream deadline (FENCE_UPSTREAM_TIMEOUT, from admission) passed: the exchange was abandoned; " +
		"the request was admitted and may or may not have reached the upstream"
	detailDeadlineNotSent = "the request's upstream deadline (FENCE_UPSTREAM_TIMEOUT, from admission) passed before it was sent: nothing was forwarded"
)

// Each upstream failure maps to one answer: the status says whether it timed
// out, the detail whether the upstream can have seen the request, and only
// an error the transport marked as unsent claims it was not sent.
func TestUpstreamProblem(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name   string
		err    error
		status int
		detail string
	}{
		{"refused, marked by the transport", &upstream.NotSentError{Err: refused}, 502, detailNotSent},
		{"dial timed out, marked by the transport", &upstream.NotSentError{Err: dialTimeout}, 504, detailNotSent},
		{"dial refused on a retry, or from another RoundTripper", refused, 502, detailMaybe},
		{"connection closed without an answer", io.ErrUnexpectedEOF, 502, detailMaybe},
		{"read timed out", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, 504, detailMaybe},
		{"deadline exceeded", context.DeadlineExceeded, 504, detailDeadline},
		{"past the deadline mid-request", errPastDeadline, 504, detailDeadline},
		{"past the deadline before the first byte", &upstream.NotSentError{Err: errPastDeadline}, 504, detailDeadlineNotSent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := upstreamProblem(tc.err, "orders")
			if p.Status != tc.status || p.Detail != tc.detail || p.Route != "orders" ||
				p.Type != "about:blank" || p.Title != http.StatusText(tc.status) {
				t.Fatalf("%+v, want status %d, detail %q, route orders", p, tc.status, tc.detail)
			}
		})
	}
}

// A client whose request the upstream could not take gets a problem that
// names its route and says whether the upstream can have seen the request,
// on both paths of the transport.
func TestUpstreamFailureAnswer(t *testing.T) {
	tests := []struct {
		name   string
		up     func(t *testing.T) string
		detail string
	}{
		{"connection refused", wiretest.ClosedPort, detailNotSent},
		{"closed after reading the request", func(t *testing.T) string { return rawServer(t, "") }, detailMaybe},
		{"answered with something that is not HTTP", func(t *testing.T) string { return rawServer(t, "garbage\r\n\r\n") }, detailMaybe},
	}
	bodies := []struct{ path, body string }{
		{"inline", "payload"},
		{"fallback", strings.Repeat("b", upstream.MaxInlineBody+1)},
	}
	for _, tc := range tests {
		for _, b := range bodies {
			t.Run(tc.name+"/"+b.path, func(t *testing.T) {
				front := frontOf(t, tc.up(t))
				req, _ := http.NewRequest("PUT", front.URL+"/r", strings.NewReader(b.body))
				req.Header.Set("Fencing-Token", "1")
				resp, body := wiretest.Send(t, front.Client(), req)
				if resp.StatusCode != http.StatusBadGateway {
					t.Fatalf("status %d (%s), want 502", resp.StatusCode, body)
				}
				p := decodeProblem(t, resp, body)
				if p.Type != "about:blank" || p.Title != "Bad Gateway" || p.Detail != tc.detail || p.Route != "default" {
					t.Fatalf("%+v, want about:blank, Bad Gateway, detail %q, route default", p, tc.detail)
				}
			})
		}
	}
}

// gatedStore is the memory store with an admission that waits for the test.
type gatedStore struct {
	fencestore.Store
	entered, release chan struct{}
}

func (g *gatedStore) Admit(ctx context.Context, a fencestore.Admission) (fencestore.Decision, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.Store.Admit(ctx, a)
}

// A client that leaves while its request is being admitted: the admission
// completes (the mark advances) and nothing is forwarded.
func TestClientGoneDuringAdmission(t *testing.T) {
	var forwarded atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { forwarded.Add(1) }))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	store := &gatedStore{Store: memstore.New(), entered: make(chan struct{}), release: make(chan struct{})}
	p, err := New(Options{Upstream: u, Routes: config.DefaultRoutes(), Store: store})
	if err != nil {
		t.Fatal(err)
	}
	reqCtx := make(chan context.Context, 1)
	served := make(chan struct{}, 2)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqCtx <- r.Context()
		p.ServeHTTP(w, r)
		served <- struct{}{}
	}))
	defer front.Close()

	// A first request leaves an idle upstream connection, so the second
	// would not even need to dial.
	go func() { <-store.entered; store.release <- struct{}{} }()
	if code, _ := put(t, front.Client(), front.URL, "/r", "", 5); code != 200 {
		t.Fatalf("first request: %d", code)
	}
	<-reqCtx
	<-served

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "PUT", front.URL+"/r", nil) // no body: the server watches the connection at once
	req.Header.Set("Fencing-Token", "7")
	errc := wiretest.Async(front.Client(), req)
	serverCtx := <-reqCtx
	<-store.entered
	cancel()
	<-errc
	<-serverCtx.Done() // the server has seen the client go
	close(store.release)
	<-served
	if n := forwarded.Load(); n != 1 {
		t.Fatalf("the upstream received %d requests, want only the first: the second's client had left", n)
	}
	if mark, ok, err := store.Mark(context.Background(), "default"); err != nil || !ok || mark != 7 {
		t.Fatalf("mark %d %v %v: the admission should have completed", mark, ok, err)
	}
}

// frontOf puts a proxy with the default routes (every method fenced) and
// its default transport in front of up.
func frontOf(t *testing.T, up string) *httptest.Server {
	t.Helper()
	u, _ := url.Parse(up)
	tr := NewTransport()
	p, err := New(Options{Upstream: u, Routes: config.DefaultRoutes(), Store: memstore.New(), Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(func() {
		front.Close()
		tr.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	})
	return front
}

// put sends a fenced PUT with body and returns status and response body.
func put(t *testing.T, c *http.Client, front, path, body string, token int) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("PUT", front+path, strings.NewReader(body))
	req.Header.Set("Fencing-Token", formatUint(uint64(token)))
	resp, b := wiretest.Send(t, c, req)
	return resp.StatusCode, b
}

// rawServer is an upstream that reads each request and answers it with raw,
// bytes written by hand, then closes the connection ("" closes it without
// answering). It returns the upstream's URL.
func rawServer(t *testing.T, raw string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	closed := false
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				_ = c.Close()
				return
			}
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				if _, err := io.Copy(io.Discard, req.Body); err != nil {
					return
				}
				_, _ = io.WriteString(c, raw)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// setXForwarded sets exactly what httputil's SetXForwarded sets, for every
// kind of inbound request; and the copy buffers recycle without allocating.
func TestSetXForwardedAsHTTPUtil(t *testing.T) {
	tests := []struct {
		name, remote, host, prior string
		tls                       bool
	}{
		{name: "plain", remote: "10.0.0.1:5555", host: "app"},
		{name: "IPv6", remote: "[::1]:5555", host: "app:8080"},
		{name: "TLS", remote: "10.0.0.1:5555", host: "app", tls: true},
		{name: "prior X-Forwarded-For on the outgoing request", remote: "10.0.0.1:5555", host: "app", prior: "1.2.3.4, 5.6.7.8"},
		{name: "no address", remote: "", host: "app", prior: "1.2.3.4"},
		{name: "no Host", remote: "10.0.0.1:5555"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pr := func() *httputil.ProxyRequest {
				in := httptest.NewRequest("PUT", "/x", nil)
				in.RemoteAddr, in.Host = tc.remote, tc.host
				if tc.tls {
					in.TLS = &tls.ConnectionState{}
				}
				out := in.Clone(context.Background())
				out.Header = http.Header{"Other": {"1"}}
				if tc.prior != "" {
					out.Header["X-Forwarded-For"] = []string{tc.prior}
				}
				return &httputil.ProxyRequest{In: in, Out: out}
			}
			want, got := pr(), pr()
			want.SetXForwarded()
			setXForwarded(got)
			if !reflect.DeepEqual(got.Out.Header, want.Out.Header) {
				t.Fatalf("headers %v, httputil sets %v", got.Out.Header, want.Out.Header)
			}
			got.Out.Header.Add("X-Forwarded-Host", "more") // an Add must not write into the next value
			if got.Out.Header.Get("X-Forwarded-Proto") != want.Out.Header.Get("X-Forwarded-Proto") {
				t.Fatal("an Add to X-Forwarded-Host changed X-Forwarded-Proto")
			}
		})
	}
	if raceEnabled {
		return // sync.Pool drops items on purpose under -race
	}
	var b bufferPool
	b.Put(b.Get())
	if n := testing.AllocsPerRun(100, func() { b.Put(b.Get()) }); n != 0 {
		t.Fatalf("a copy buffer's round trip allocates %.0f times", n)
	}
}

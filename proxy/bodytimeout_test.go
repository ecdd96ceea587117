package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/config"
	"github.com/fenceproxy/fenceproxy/fencestore/memstore"
	"github.com/fenceproxy/fenceproxy/internal/wiretest"
)

// bodyTimeoutProxy is a real proxy server with BodyTimeout d in front of h.
func bodyTimeoutProxy(t *testing.T, d time.Duration, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(h)
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	p, err := New(Options{Upstream: u, Routes: config.DefaultRoutes(), Store: memstore.New(), BodyTimeout: d})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	return front
}

// A client that sends part of its body and stops holds nothing for longer
// than FENCE_BODY_TIMEOUT: its read fails, its connection is closed, and the
// upstream never gets a complete request (a small body is sent in one write
// with its headers, so the upstream sees nothing; a large one is streamed, so
// the upstream sees its body end in an error). Before the bound, all of them
// waited for ever.
func TestStalledBodyIsCutOff(t *testing.T) {
	for _, size := range []int{100, 200 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			upstreamErr := make(chan error, 1)
			front := bodyTimeoutProxy(t, 300*time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
				_, err := io.ReadAll(r.Body)
				upstreamErr <- err
			})
			conn, err := net.Dial("tcp", front.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			head := "PUT /x HTTP/1.1\r\nHost: a\r\nFencing-Token: 1\r\nContent-Length: " + strconv.Itoa(size) + "\r\n\r\n"
			if _, err := io.WriteString(conn, head+strings.Repeat("x", size/2)); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.Copy(io.Discard, conn); err != nil {
				t.Fatalf("the stalled client's connection was still open after 10s (bound 300ms): %v", err)
			}
			select {
			case err := <-upstreamErr:
				if err == nil {
					t.Fatal("the upstream read a complete body")
				}
			case <-time.After(100 * time.Millisecond):
				if size > maxBodyFirst {
					t.Fatal("the streamed request never reached the upstream")
				}
			}
		})
	}
}

// The bound is on reading the body, not on the whole exchange: once the body
// is in, an upstream may take longer than the bound to answer.
func TestBodyTimeoutDoesNotCutASlowResponse(t *testing.T) {
	front := bodyTimeoutProxy(t, 200*time.Millisecond, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		time.Sleep(700 * time.Millisecond)
		_, _ = io.WriteString(w, "done")
	})
	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "PUT /x HTTP/1.1\r\nHost: a\r\nFencing-Token: 1\r\nContent-Length: 4\r\n\r\nbody")
	resp, err := wiretest.Answer(conn, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(b) != "done" {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
}

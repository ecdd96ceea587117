// Package wiretest holds the client side of the wire-level tests of the
// proxy and of its upstream transport: a test that writes a request byte by
// byte (half a body, a stall, framing no http.Client would send) reads the
// answer with Answer; Write, Send, Async and ClosedPort are the helpers both
// packages' tests share. Answer lives apart from package proxy so that
// nothing under proxy/ parses HTTP responses: reading responses off a
// connection is internal/upstream's job, and the proxy only fences.
package wiretest

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/freeport"
)

// Answer reads one HTTP response from conn (the answer to a request the
// test wrote itself), within timeout when it is above zero.
func Answer(conn net.Conn, timeout time.Duration) (*http.Response, error) {
	if timeout > 0 {
		if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			return nil, err
		}
	}
	return http.ReadResponse(bufio.NewReader(conn), nil)
}

// Write dials the server at url (http://host:port), writes raw on the new
// connection and returns it, closed when the test ends; reads and writes on
// it fail after 10 s. A failure fails the test.
func Write(t testing.TB, url, raw string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	return c
}

// Send does req with c and returns the response with its body read whole;
// a failure fails the test.
func Send(t testing.TB, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// Async sends req with c from another goroutine; its error (nil on
// success, the body closed unread) arrives on the channel.
func Async(c *http.Client, req *http.Request) <-chan error {
	errc := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	return errc
}

// ClosedPort returns the URL of a loopback port nothing listens on: dials
// to it are refused. It is never a port another test of this process was
// given to listen on.
func ClosedPort(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// Package wiretest is the raw client of the proxy's wire-level tests: a
// test that writes a request byte by byte (half a body, a stall, framing
// no http.Client would send) reads the answer with Answer. It lives apart
// from package proxy so that nothing under proxy/ parses HTTP responses:
// reading responses off a connection is internal/upstream's job, and the
// proxy only fences.
package wiretest

import (
	"bufio"
	"net"
	"net/http"
	"time"
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
